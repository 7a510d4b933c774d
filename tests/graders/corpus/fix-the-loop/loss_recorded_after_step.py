# expect: loss-after-update, score 6-8
import torch


def train(model, optimizer, loss_fn, batches, epochs):
    losses = []
    for _ in range(epochs):
        for x, y in batches:
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            optimizer.step()
            with torch.no_grad():
                losses.append(loss_fn(model(x), y).item())
    return losses
