# expect: wrong-loss-scaling, score 2-4
def accumulated_step(model, optimizer, loss_fn, micro_batches):
    model.zero_grad()
    losses = []
    for x, y in micro_batches:
        loss = loss_fn(model(x), y)
        loss.backward()
        losses.append(loss.item())
    optimizer.step()
    return sum(losses) / len(losses)
