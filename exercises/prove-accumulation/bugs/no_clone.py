def accumulation_demo(model, loss_fn, x, y):
    loss_fn(model(x), y).backward()
    first = model.weight.grad
    loss_fn(model(x), y).backward()
    second = model.weight.grad
    return first, second
