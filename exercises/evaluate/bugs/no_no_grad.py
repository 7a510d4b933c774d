def evaluate(model, loss_fn, x, y):
    model.eval()
    loss = loss_fn(model(x), y).item()  # the bug: autograd records a graph
    model.train()
    return loss
