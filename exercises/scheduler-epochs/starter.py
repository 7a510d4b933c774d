def train(model, optimizer, scheduler, loss_fn, batches, epochs):
    """Train for `epochs` passes over `batches`, stepping the scheduler once per epoch.

    Return the mean loss of each epoch (each batch's loss read before its step).
    """
    epoch_losses = []
    # Your loop goes here: for each epoch, zero, backward and step on every batch, then
    # step the scheduler.
    return epoch_losses
