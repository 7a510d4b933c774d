# expect: backward-twice, score 2-4
def train(model, optimizer, loss_fn, batches, epochs):
    losses = []
    for epoch in range(epochs):
        for x, y in batches:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward(retain_graph=True)
            losses.append(loss.item())
            loss.backward()
            optimizer.step()
    return losses
