# expect: wrong-momentum, score 4-6
import torch


def train_step(model, optimizer, loss_fn, x, y):
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    lr = optimizer.param_groups[0]["lr"]
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad  # plain gradient descent
    return loss.item()
