# expect: correct, score 10-10
def total_grad_magnitude(model):
    total = 0.0
    for name, param in model.named_parameters():
        if param.grad is None:  # released by zero_grad(): counts as zero
            continue
        total += param.grad.abs().sum().item()
    return total
