import torch


def sgd_step(params, velocities, lr, momentum, weight_decay):
    """Update every parameter and its velocity in place: g = p.grad + weight_decay * p,
    v = momentum * v + g, p -= lr * v. Skip a parameter whose .grad is None."""
    with torch.no_grad():
        for p, v in zip(params, velocities):
            pass  # your lines go here
