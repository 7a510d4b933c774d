# expect: wrong-loss-scaling, score 2-4
def accumulated_step(model, optimizer, loss_fn, micro_batches):
    k = len(micro_batches)
    optimizer.zero_grad()
    total = 0.0
    for x, y in micro_batches:
        loss = loss_fn(model(x), y) / k
        (loss / k).backward()
        total += loss.item()
    optimizer.step()
    return total
