# expect: not-started, score 0-0
import torch


def evaluate(model, loss_fn, x, y):
    result = 0.0
    return result
