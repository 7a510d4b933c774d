def train(model, optimizer, loss_fn, batches, epochs):
    """Train for `epochs` passes over `batches`; return the loss of every iteration."""
    losses = []
    for epoch in range(epochs):
        for x, y in batches:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return losses
