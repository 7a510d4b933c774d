# expect: step-skipped, score 1-3
def train(model, optimizer, loss_fn, batches, epochs):
    losses = []
    for epoch in range(epochs):
        for i, (x, y) in enumerate(batches):
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            if i != len(batches) - 1:  # off by one
                optimizer.step()
            losses.append(loss.item())
    return losses
