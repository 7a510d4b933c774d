# expect: correct, score 10-10
def one_epoch(model, optimizer, loss_fn, batches):
    losses = []
    for inputs, targets in batches:
        optimizer.zero_grad()
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return sum(losses) / len(losses)


def train(model, optimizer, scheduler, loss_fn, batches, epochs):
    history = []
    for _ in range(epochs):
        history.append(one_epoch(model, optimizer, loss_fn, batches))
        scheduler.step()
    return history
