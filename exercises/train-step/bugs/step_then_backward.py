def train_step(model, optimizer, loss_fn, x, y):
    loss = loss_fn(model(x), y)
    optimizer.step()
    optimizer.zero_grad()
    loss.backward()
    return loss.item()
