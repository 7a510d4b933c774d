import torch


def evaluate(model, loss_fn, x, y):
    """Return the model's loss on (x, y) as a float, measured in evaluation mode, without
    recording a graph or touching a gradient; leave the model in training mode."""
    model.eval()
    with torch.no_grad():
        loss = loss_fn(model(x), y).item()
    model.train()
    return loss
