# expect: step-skipped, score 3-3
def train_step(model, optimizer, loss_fn, x, y):
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    if loss.item() > 1.0:
        optimizer.step()
    return loss.item()
