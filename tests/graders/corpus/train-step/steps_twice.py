# expect: step-twice, score 4-6
def train_step(model, optimizer, loss_fn, x, y):
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    for _ in range(2):  # two small steps
        optimizer.step()
    return loss.item()
