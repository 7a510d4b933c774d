# expect: incorrect, score 4-6
def total_grad_magnitude(model):
    total = 0.0
    for p in model.parameters():
        if p.grad is not None:
            total += p.grad.norm().item()
    return total
