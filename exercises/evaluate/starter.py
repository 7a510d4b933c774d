import torch


def evaluate(model, loss_fn, x, y):
    """Return the model's loss on (x, y) as a float, in evaluation mode, under no_grad."""
    loss = 0.0
    # Your lines go here; leave the model in training mode.
    return loss
