# expect: incorrect, score 8-8
def train(model, optimizer, scheduler, loss_fn, batches, epochs):
    losses = []
    for epoch in range(epochs):
        for x, y in batches:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        scheduler.step()
    return losses
