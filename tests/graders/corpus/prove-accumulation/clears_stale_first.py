# expect: grad-none-error, score 0-1
def accumulation_demo(model, loss_fn, x, y):
    # make sure we start from zero
    model.weight.grad.zero_()
    model.bias.grad.zero_()
    loss_fn(model(x), y).backward()
    a = model.weight.grad.clone()
    loss_fn(model(x), y).backward()
    b = model.weight.grad.clone()
    return a, b
