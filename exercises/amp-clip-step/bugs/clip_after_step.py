import torch


def train_step(model, optimizer, scaler, loss_fn, x, y, max_norm):
    optimizer.zero_grad()
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)  # after the step: too late
    scaler.update()
    return loss.item()
