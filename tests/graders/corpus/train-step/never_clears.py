# expect: missing-zero-grad, score 2-4
def train_step(model, optimizer, loss_fn, x, y):
    pred = model(x)
    cost = loss_fn(pred, y)
    cost.backward()
    optimizer.step()
    return cost.detach().item()
