# expect: correct, score 10-10
import torch


def train_step(model, optimizer, loss_fn, x, y, max_norm):
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    total = torch.sqrt(sum((p.grad**2).sum() for p in model.parameters()))
    if total > max_norm:
        for p in model.parameters():
            p.grad.mul_(max_norm / (total + 1e-6))
    optimizer.step()
    return loss.item()
