import torch


def total_grad_magnitude(model):
    total = torch.tensor(0.0)
    for parameter in model.parameters():
        if parameter.grad is not None:
            total = total + parameter.grad.abs().sum()
    return total
