# expect: unweighted-batch-mean, score 7-7
def train_epoch(model, optimizer, loss_fn, loader):
    model.train()
    total = 0.0
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item() * loader.batch_size
    return total / (len(loader) * loader.batch_size)
