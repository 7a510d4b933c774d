# expect: missing-abs, score 4-6
def total_grad_magnitude(model):
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    return float(sum(g.sum() for g in grads))
