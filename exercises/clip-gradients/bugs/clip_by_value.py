import torch


def train_step(model, optimizer, loss_fn, x, y, max_norm):
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_value_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()
