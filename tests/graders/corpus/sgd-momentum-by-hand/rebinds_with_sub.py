# expect: parameter-rebound, score 6-6
import torch


def sgd_step(params, velocities, lr, momentum, weight_decay):
    with torch.no_grad():
        for p, v in zip(params, velocities):
            if p.grad is None:
                continue
            g = p.grad + weight_decay * p
            v.mul_(momentum).add_(g)
            p = p.sub(lr * v)  # new value for p
