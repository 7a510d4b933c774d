# expect: step-before-backward, score 0-2
def train_step(model, optimizer, loss_fn, x, y):
    # apply the update first, then get gradients for next time
    optimizer.step()
    optimizer.zero_grad()
    out = model(x)
    loss = loss_fn(out, y)
    loss.backward()
    return loss.item()
