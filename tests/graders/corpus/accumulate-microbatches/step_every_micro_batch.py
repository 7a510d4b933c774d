# expect: step-per-microbatch, score 1-3
def accumulated_step(model, optimizer, loss_fn, micro_batches):
    mean_loss = 0.0
    for x, y in micro_batches:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y) / len(micro_batches)
        loss.backward()
        optimizer.step()
        mean_loss += loss.item()
    return mean_loss
