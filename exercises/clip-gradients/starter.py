import torch


def train_step(model, optimizer, loss_fn, x, y, max_norm):
    """Run one step on (x, y) with the gradients clipped to max_norm; return the loss."""
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    # Your lines go here: backward, clip to max_norm, step.
    return loss.item()
