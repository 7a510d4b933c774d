# expect: incorrect, score 3-3
import torch


def train_step(model, optimizer, loss_fn, x, y, max_norm):
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    for p in model.parameters():
        torch.nn.utils.clip_grad_norm_(p, max_norm)
    optimizer.step()
    return loss.item()
