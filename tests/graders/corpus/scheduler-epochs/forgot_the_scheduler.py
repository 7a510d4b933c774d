# expect: scheduler-never, score 3-3
def train(model, optimizer, scheduler, loss_fn, batches, epochs):
    epoch_means = []
    for _ in range(epochs):
        losses = []
        for inputs, targets in batches:
            model.zero_grad()
            loss = loss_fn(model(inputs), targets)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        epoch_means.append(sum(losses) / len(losses))
    return epoch_means
