# expect: returns-live-gradient, score 5-7
def accumulation_demo(model, loss_fn, x, y):
    loss = loss_fn(model(x), y)
    loss.backward()
    grad_after_one = model.weight.grad
    loss = loss_fn(model(x), y)
    loss.backward()
    grad_after_two = model.weight.grad
    return grad_after_one, grad_after_two
