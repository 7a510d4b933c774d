# expect: loss-sum-not-mean, score 1-3
def accumulated_step(model, optimizer, loss_fn, micro_batches):
    optimizer.zero_grad()
    total = 0.0
    for x, y in micro_batches:
        squared = (model(x) - y) ** 2
        loss = squared.sum() / len(micro_batches)
        loss.backward()
        total += loss.item()
    optimizer.step()
    return total
