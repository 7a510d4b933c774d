import copy

import torch


def fit(model, optimizer, loss_fn, train_batches, val_batches, max_epochs, patience):
    losses = []
    best_loss, best_state, without = float("inf"), None, 0
    for epoch in range(max_epochs):
        model.train()
        for x, y in train_batches:
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            val_loss = sum(loss_fn(model(x), y).item() for x, y in val_batches) / len(val_batches)
        model.train()
        losses.append(val_loss)
        if val_loss < best_loss:
            best_loss, without = val_loss, 0
            best_state = copy.deepcopy(model.state_dict())
        else:
            without += 1
            if without >= patience:
                break
    model.load_state_dict(best_state)
    return losses
