# expect: incorrect, score 10-10
def train_epoch(model, optimizer, loss_fn, loader):
    total, count = 0.0, 0
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item() * len(x)
        count += len(x)
    model.train()
    return total / count
