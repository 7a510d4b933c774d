# expect: correct, score 9-9
import torch


def evaluate(model, loss_fn, x, y):
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        prediction = model(x)
        value = loss_fn(prediction, y).item()
    model.train(was_training)
    return value
