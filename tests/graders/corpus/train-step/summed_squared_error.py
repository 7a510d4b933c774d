# expect: loss-sum-not-mean, score 1-3
def train_step(model, optimizer, loss_fn, x, y):
    optimizer.zero_grad()
    err = model(x) - y
    loss = (err**2).sum()  # squared error
    loss.backward()
    optimizer.step()
    return loss.item()
