# expect: loss-sum-not-mean, score 2-4
def train(model, optimizer, loss_fn, batches, epochs):
    losses = []
    for epoch in range(epochs):
        for x, y in batches:
            model.zero_grad()
            loss = ((model(x) - y) ** 2).sum()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return losses
