def train(model, optimizer, loss_fn, batches, epochs):
    losses = []
    for epoch in range(epochs):
        for x, y in batches:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            losses.append(loss.item())
    return losses
