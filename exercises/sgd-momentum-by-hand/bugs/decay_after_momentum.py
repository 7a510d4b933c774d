import torch


def sgd_step(params, velocities, lr, momentum, weight_decay):
    with torch.no_grad():
        for p, v in zip(params, velocities):
            if p.grad is None:
                continue
            v.mul_(momentum).add_(p.grad)
            p -= lr * (v + weight_decay * p)
