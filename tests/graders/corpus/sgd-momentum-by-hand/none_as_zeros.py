# expect: incorrect, score 3-3
import torch


def sgd_step(params, velocities, lr, momentum, weight_decay):
    with torch.no_grad():
        for p, v in zip(params, velocities):
            grad = p.grad if p.grad is not None else torch.zeros_like(p)
            v.mul_(momentum).add_(grad + weight_decay * p)
            p.sub_(lr * v)
