def train_step(model, optimizer, loss_fn, x, y):
    """Run one Adam step on (x, y); return the loss before the update as a float."""
    prediction = model(x)
    loss = loss_fn(prediction, y)
    # Your three lines go here: zero, backward, step.
    return loss.item()
