# expect: incorrect, score 7-9
def accumulation_demo(model, loss_fn, x, y):
    loss = loss_fn(model(x), y)
    loss.backward(retain_graph=True)
    first = model.weight.grad.clone()
    # second pass should be twice the first, so double the loss?
    (2 * loss).backward()
    second = model.weight.grad.clone()
    return first, second
