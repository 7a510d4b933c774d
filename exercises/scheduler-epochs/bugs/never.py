def train(model, optimizer, scheduler, loss_fn, batches, epochs):
    epoch_losses = []
    for epoch in range(epochs):
        total = 0.0
        for x, y in batches:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            total += loss.item()
        epoch_losses.append(total / len(batches))  # the bug: no scheduler.step()
    return epoch_losses
