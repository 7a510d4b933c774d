def evaluate(model, loss_fn, x, y):
    model.eval()
    loss = loss_fn(model(x), y)
    loss.backward()  # the bug: evaluation computes gradients
    model.train()
    return loss.item()
