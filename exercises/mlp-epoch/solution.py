def train_epoch(model, optimizer, loss_fn, loader):
    """One pass over the loader: training mode, then zero, backward, step per batch; the mean
    loss per example, each batch's mean loss weighted by its size."""
    model.train()
    total, count = 0.0, 0
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item() * len(x)
        count += len(x)
    return total / count
