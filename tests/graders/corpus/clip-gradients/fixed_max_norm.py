# expect: clip-norm-constant, score 3-3
import torch

MAX_NORM = 1.0


def train_step(model, optimizer, loss_fn, x, y, max_norm):
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=MAX_NORM)
    optimizer.step()
    return loss.item()
