# expect: loss-after-update, score 8-9
import torch


def accumulated_step(model, optimizer, loss_fn, micro_batches):
    optimizer.zero_grad()
    for x, y in micro_batches:
        (loss_fn(model(x), y) / len(micro_batches)).backward()
    optimizer.step()
    with torch.no_grad():
        after = [loss_fn(model(x), y).item() for x, y in micro_batches]
    return sum(after) / len(after)
