# expect: wrong-learning-rate, score 4-6
import torch

LEARNING_RATE = 0.01


def train_step(model, optimizer, loss_fn, x, y):
    model.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    with torch.no_grad():
        model.weight -= LEARNING_RATE * model.weight.grad
        model.bias -= LEARNING_RATE * model.bias.grad
    return loss.item()
