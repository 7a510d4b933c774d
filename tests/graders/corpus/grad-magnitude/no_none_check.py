# expect: grad-none-error, score 0-1
def total_grad_magnitude(model):
    total = 0.0
    for weight in model.parameters():
        total += weight.grad.abs().sum().item()
    return total
