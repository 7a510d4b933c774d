import torch


def evaluate(model, loss_fn, x, y):
    """Return the model's loss on (x, y) as a float, measured in evaluation mode, without
    recording a graph or touching a gradient; leave the model in training mode."""
    loss = 0.0
    # Your lines go here.
    return loss
