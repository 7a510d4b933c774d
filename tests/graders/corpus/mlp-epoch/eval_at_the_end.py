# expect: missing-train-mode, score 9-9
def train_epoch(model, optimizer, loss_fn, loader):
    model.train()
    total, count = 0.0, 0
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item() * len(x)
        count += len(x)
    model.eval()  # ready for validation
    return total / count
