def train(model, optimizer, scheduler, loss_fn, batches, epochs):
    epoch_losses = []
    for epoch in range(epochs):
        total = 0.0
        for x, y in batches:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            scheduler.step()  # the bug: once per batch
            total += loss.item()
        epoch_losses.append(total / len(batches))
    return epoch_losses
