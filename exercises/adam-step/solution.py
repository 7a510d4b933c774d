def train_step(model, optimizer, loss_fn, x, y):
    """Run one Adam step on (x, y); return the loss before the update as a float."""
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.item()
