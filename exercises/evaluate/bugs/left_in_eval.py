import torch


def evaluate(model, loss_fn, x, y):
    model.eval()
    with torch.no_grad():
        loss = loss_fn(model(x), y).item()
    return loss  # the bug: the model stays in evaluation mode
