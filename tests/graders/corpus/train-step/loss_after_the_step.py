# expect: loss-after-update, score 8-9
import torch


def train_step(model, optimizer, loss_fn, x, y):
    optimizer.zero_grad()
    loss_fn(model(x), y).backward()
    optimizer.step()
    with torch.no_grad():
        new_loss = loss_fn(model(x), y)  # report the improved loss
    return new_loss.item()
