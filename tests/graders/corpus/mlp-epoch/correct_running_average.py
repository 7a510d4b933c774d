# expect: correct, score 10-10
def train_epoch(model, optimizer, loss_fn, loader):
    model.train()
    avg, n = 0.0, 0
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        b = len(x)
        avg = (avg * n + loss.item() * b) / (n + b)  # running mean per example
        n += b
    return avg
