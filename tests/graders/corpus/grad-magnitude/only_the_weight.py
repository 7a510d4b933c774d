# expect: incorrect, score 4-6
def total_grad_magnitude(model):
    g = model.weight.grad
    if g is None:
        return 0.0
    return g.abs().sum().item()
