# expect: correct, score 10-10
def run_batch(model, optimizer, loss_fn, inputs, targets):
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    optimizer.step()
    return loss.item()


def train(model, optimizer, loss_fn, batches, epochs):
    history = []
    for epoch in range(epochs):
        for inputs, targets in batches:
            history.append(run_batch(model, optimizer, loss_fn, inputs, targets))
    return history
