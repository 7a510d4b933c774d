def train(model, optimizer, loss_fn, batches, epochs):
    losses = []
    for epoch in range(epochs):
        for x, y in batches:
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.zero_grad()
            optimizer.step()
            losses.append(loss.item())
    return losses
