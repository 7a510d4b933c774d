# expect: zero-grad-skipped, score 2-4
def train(model, optimizer, loss_fn, batches, epochs):
    losses = []
    for epoch in range(epochs):
        optimizer.zero_grad()  # start each epoch clean
        for x, y in batches:
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return losses
