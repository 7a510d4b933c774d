import torch


def evaluate(model, loss_fn, x, y):
    with torch.no_grad():
        loss = loss_fn(model(x), y).item()
    model.eval()  # the bug: evaluation mode comes after the forward pass (and stays)
    return loss
