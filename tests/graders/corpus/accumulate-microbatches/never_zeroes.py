# expect: missing-zero-grad, score 2-4
def accumulated_step(model, optimizer, loss_fn, micro_batches):
    total = 0.0
    for x, y in micro_batches:
        l = loss_fn(model(x), y) / len(micro_batches)
        l.backward()
        total += l.item()
    optimizer.step()
    return total
