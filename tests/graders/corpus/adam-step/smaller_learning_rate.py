# expect: wrong-learning-rate, score 4-4
def train_step(model, optimizer, loss_fn, x, y):
    for group in optimizer.param_groups:
        group["lr"] = 1e-3  # Adam's usual learning rate
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.item()
