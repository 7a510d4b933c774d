# expect: zero-grad-before-step, score 1-3
def train_step(model, optimizer, loss_fn, x, y):
    output = model(x)
    loss = loss_fn(output, y)
    loss.backward()
    optimizer.zero_grad()
    optimizer.step()
    return float(loss)
