# expect: not-started, score 0-0
import torch


def sgd_step(params, velocities, lr, momentum, weight_decay):
    with torch.no_grad():
        for param, velocity in zip(params, velocities):
            pass  # TODO
