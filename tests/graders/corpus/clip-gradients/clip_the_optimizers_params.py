# expect: correct, score 10-10
import torch


def train_step(model, optimizer, loss_fn, x, y, max_norm):
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    for group in optimizer.param_groups:
        torch.nn.utils.clip_grad_norm_(group["params"], max_norm)
    optimizer.step()
    return loss.item()
