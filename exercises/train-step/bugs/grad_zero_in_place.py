def train_step(model, optimizer, loss_fn, x, y):
    # Clearing by hand, as if .grad were always a tensor: after zero_grad() it is None.
    for parameter in model.parameters():
        parameter.grad.zero_()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()
