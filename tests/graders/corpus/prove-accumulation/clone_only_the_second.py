# expect: returns-live-gradient, score 5-7
def accumulation_demo(model, loss_fn, x, y):
    loss_fn(model(x), y).backward()
    first = model.weight.grad  # TODO do I need a copy here?
    loss_fn(model(x), y).backward()
    second = model.weight.grad.clone()
    return first, second
