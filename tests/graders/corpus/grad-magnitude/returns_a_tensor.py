# expect: wrong-return-type, score 8-9
import torch


def total_grad_magnitude(model):
    parts = [p.grad.abs().sum() for p in model.parameters() if p.grad is not None]
    if not parts:
        return torch.tensor(0.0)
    return torch.stack(parts).sum()
