# expect: gradient-written, score 8-8
import torch


def sgd_step(params, velocities, lr, momentum, weight_decay):
    with torch.no_grad():
        for p, v in zip(params, velocities):
            if p.grad is not None:
                p.grad += weight_decay * p
                v.mul_(momentum).add_(p.grad)
                p.sub_(lr * v)
