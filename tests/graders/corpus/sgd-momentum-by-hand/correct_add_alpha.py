# expect: correct, score 10-10
import torch


def sgd_step(params, velocities, lr, momentum, weight_decay):
    with torch.no_grad():
        for param, buf in zip(params, velocities):
            if param.grad is None:
                continue  # frozen this step
            d_p = param.grad.add(param, alpha=weight_decay)
            buf.mul_(momentum).add_(d_p)
            param.add_(buf, alpha=-lr)
