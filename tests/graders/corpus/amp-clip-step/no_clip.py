# expect: unclipped-step, score 4-4
import torch


def train_step(model, optimizer, scaler, loss_fn, x, y, max_norm):
    optimizer.zero_grad()
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()
