# expect: correct, score 10-10
def train_step(model, optimizer, loss_fn, x, y):
    for parameter in model.parameters():
        parameter.grad = None
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return float(loss)
