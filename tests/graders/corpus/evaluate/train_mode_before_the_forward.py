# expect: missing-eval, score 4-4
import torch


def evaluate(model, loss_fn, x, y):
    model.eval()
    with torch.no_grad():
        model.train()  # "back to training mode", one line too early
        loss = loss_fn(model(x), y).item()
    return loss
