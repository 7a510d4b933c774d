# expect: incorrect, score 3-3
def train_epoch(model, optimizer, loss_fn, loader):
    model.train()
    optimizer.zero_grad()
    total, count = 0.0, 0
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        total += loss.item() * len(x)
        count += len(x)
    optimizer.step()
    return total / count
