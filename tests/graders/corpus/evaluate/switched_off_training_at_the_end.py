# expect: left-in-eval-mode, score 8-8
import torch


def evaluate(model, loss_fn, x, y):
    model.train(False)
    with torch.no_grad():
        result = loss_fn(model(x), y).item()
    model.train(mode=False)
    return result
