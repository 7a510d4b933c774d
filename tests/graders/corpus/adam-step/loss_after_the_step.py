# expect: loss-after-update, score 9-9
def train_step(model, optimizer, loss_fn, x, y):
    optimizer.zero_grad()
    loss_fn(model(x), y).backward()
    optimizer.step()
    return loss_fn(model(x), y).item()
