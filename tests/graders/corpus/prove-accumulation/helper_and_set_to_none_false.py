# expect: correct, score 10-10
import torch


def backward_once(model, loss_fn, x, y):
    prediction = model(x)
    loss_fn(prediction, y).backward()
    return torch.clone(model.weight.grad)


def accumulation_demo(model, loss_fn, x, y):
    model.zero_grad(set_to_none=False)  # harmless: there is nothing to clear yet
    first = backward_once(model, loss_fn, x, y)
    second = backward_once(model, loss_fn, x, y)
    return first, second
