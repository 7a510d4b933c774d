# expect: modifies-gradients, score 6-8
def total_grad_magnitude(model):
    total = 0.0
    for p in model.parameters():
        if p.grad is not None:
            total += p.grad.abs_().sum().item()
    return total
