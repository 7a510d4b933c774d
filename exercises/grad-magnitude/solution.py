def total_grad_magnitude(model):
    """Return the sum of |grad| over all parameters, counting a None gradient as zero."""
    total = 0.0
    for parameter in model.parameters():
        if parameter.grad is not None:
            total += parameter.grad.abs().sum().item()
    return total
