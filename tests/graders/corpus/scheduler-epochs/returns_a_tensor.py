# expect: wrong-return-type, score 8-8
import torch


def train(model, optimizer, scheduler, loss_fn, batches, epochs):
    means = []
    for epoch in range(epochs):
        total = 0.0
        for x, y in batches:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            total += loss.item()
        scheduler.step()
        means.append(total / len(batches))
    return torch.tensor(means)
