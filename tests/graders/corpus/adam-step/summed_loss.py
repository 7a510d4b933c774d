# expect: loss-sum-not-mean, score 3-3
def train_step(model, optimizer, loss_fn, x, y):
    optimizer.zero_grad()
    loss = ((model(x) - y) ** 2).sum()
    loss.backward()
    optimizer.step()
    return loss.item()
