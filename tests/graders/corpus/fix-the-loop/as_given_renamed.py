# expect: not-started, score 0-0
def train(model, optimizer, loss_fn, batches, epochs):
    all_losses = []
    for e in range(epochs):
        for xb, yb in batches:
            loss = loss_fn(model(xb), yb)
            optimizer.step()  # update
            loss.backward()  # gradients
            all_losses.append(loss.item())
    return all_losses
