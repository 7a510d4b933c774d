# expect: missing-autocast, score 4-4
import torch


def train_step(model, optimizer, scaler, loss_fn, x, y, max_norm):
    optimizer.zero_grad()
    if True:  # autocast later
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()
