import torch


def sgd_step(params, velocities, lr, momentum, weight_decay):
    with torch.no_grad():
        for p, v in zip(params, velocities):
            if p.grad is None:
                continue
            g = p.grad + weight_decay * p
            v.mul_(momentum).add_((1 - momentum) * g)
            p -= lr * v
