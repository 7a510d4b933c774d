# expect: grads-accumulated-across-batches, score 6-6
def train_epoch(model, optimizer, loss_fn, loader):
    model.train()
    total, count = 0.0, 0
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item() * len(x)
        count += len(x)
    return total / count
