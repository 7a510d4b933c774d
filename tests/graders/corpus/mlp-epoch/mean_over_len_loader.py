# expect: unweighted-batch-mean, score 7-7
def train_epoch(model, optimizer, loss_fn, loader):
    model.train()
    epoch_loss = 0.0
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        epoch_loss += loss.item()
    return epoch_loss / len(loader)
