# expect: runtime-error, score 0-0
def sgd_step(params, velocities, lr, momentum, weight_decay):
    for p, v in zip(params, velocities):
        if p.grad is None:
            continue
        g = p.grad + weight_decay * p
        v.mul_(momentum).add_(g)
        p -= lr * v
