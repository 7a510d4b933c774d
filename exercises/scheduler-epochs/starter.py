def train(model, optimizer, scheduler, loss_fn, batches, epochs):
    """Train for `epochs` epochs; return each epoch's mean loss, in a list."""
    epoch_losses = []
    # Your loop goes here: for each epoch, zero, backward and step on every batch,
    # then step the scheduler once.
    return epoch_losses
