def accumulation_demo(model, loss_fn, x, y):
    """Return the weight gradient after one backward pass and after a second one, as copies."""
    loss_fn(model(x), y).backward()
    first = model.weight.grad.clone()
    loss_fn(model(x), y).backward()
    second = model.weight.grad.clone()
    return first, second
