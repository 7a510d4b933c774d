import torch


def sgd_step(params, velocities, lr, momentum, weight_decay):
    """One step of SGD with momentum and weight decay, in place, as torch.optim.SGD makes it."""
    with torch.no_grad():
        for p, v in zip(params, velocities):
            if p.grad is None:
                continue
            g = p.grad + weight_decay * p
            v.mul_(momentum).add_(g)
            p.sub_(lr * v)
