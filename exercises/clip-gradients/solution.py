import torch


def train_step(model, optimizer, loss_fn, x, y, max_norm):
    """Run one step on (x, y) with the gradients clipped to max_norm; return the loss."""
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()
