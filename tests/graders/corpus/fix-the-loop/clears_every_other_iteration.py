# expect: zero-grad-skipped, score 2-4
def train(model, optimizer, loss_fn, batches, epochs):
    losses = []
    iteration = 0
    while iteration < epochs * len(batches):
        x, y = batches[iteration % len(batches)]
        if iteration % 2 == 0:
            optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        iteration += 1
    return losses
