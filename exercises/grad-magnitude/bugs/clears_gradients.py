def total_grad_magnitude(model):
    total = 0.0
    for parameter in model.parameters():
        if parameter.grad is not None:
            total += parameter.grad.abs().sum().item()
    model.zero_grad()
    return total
