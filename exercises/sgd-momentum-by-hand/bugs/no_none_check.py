import torch


def sgd_step(params, velocities, lr, momentum, weight_decay):
    with torch.no_grad():
        for p, v in zip(params, velocities):
            g = p.grad.add(p, alpha=weight_decay)
            v.mul_(momentum).add_(g)
            p -= lr * v
