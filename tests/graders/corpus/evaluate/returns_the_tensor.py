# expect: wrong-return-type, score 8-8
import torch


def evaluate(model, loss_fn, x, y):
    model.eval()
    with torch.no_grad():
        loss = loss_fn(model(x), y)
    model.train()
    return loss
