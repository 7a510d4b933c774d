def accumulation_demo(model, loss_fn, x, y):
    loss_fn(model(x), y).backward()
    first = model.weight.grad.clone()
    model.zero_grad()
    loss_fn(model(x), y).backward()
    second = model.weight.grad.clone()
    return first, second
