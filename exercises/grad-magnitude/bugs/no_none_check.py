def total_grad_magnitude(model):
    return sum(p.grad.abs().sum().item() for p in model.parameters())
