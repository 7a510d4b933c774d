# expect: missing-zero-grad, score 3-3
def train_step(model, optimizer, loss_fn, x, y):
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()  # tidy up for the next call
    return loss.item()
