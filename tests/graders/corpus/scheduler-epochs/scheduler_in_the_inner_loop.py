# expect: scheduler-per-batch, score 3-3
def train(model, optimizer, scheduler, loss_fn, batches, epochs):
    per_epoch = []
    for epoch in range(epochs):
        batch_losses = []
        for x, y in batches:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            batch_losses.append(loss.item())
            loss.backward()
            optimizer.step()
            scheduler.step()
        per_epoch.append(sum(batch_losses) / len(batch_losses))
    return per_epoch
