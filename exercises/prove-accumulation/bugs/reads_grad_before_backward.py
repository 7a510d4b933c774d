def accumulation_demo(model, loss_fn, x, y):
    model.weight.grad.zero_()
    loss_fn(model(x), y).backward()
    first = model.weight.grad.clone()
    loss_fn(model(x), y).backward()
    second = model.weight.grad.clone()
    return first, second
