# expect: correct, score 9-9
import torch


@torch.no_grad()
def evaluate(model, loss_fn, x, y):
    model.eval()
    try:
        return float(loss_fn(model(x), y))
    finally:
        model.train()
