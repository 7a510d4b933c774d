def accumulation_demo(model, loss_fn, x, y):
    """Return the weight gradient after one backward pass and after a second one, as copies."""
    loss_fn(model(x), y).backward()
    first = ...  # a copy of model.weight.grad now
    # A second forward and backward pass, without clearing:
    second = ...  # a copy of model.weight.grad now
    return first, second
