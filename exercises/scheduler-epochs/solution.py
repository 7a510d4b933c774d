def train(model, optimizer, scheduler, loss_fn, batches, epochs):
    """Train for `epochs` passes over `batches`, stepping the scheduler once per epoch.

    Return the mean loss of each epoch (each batch's loss read before its step).
    """
    epoch_losses = []
    for epoch in range(epochs):
        total = 0.0
        for x, y in batches:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            total += loss.item()
        scheduler.step()
        epoch_losses.append(total / len(batches))
    return epoch_losses
