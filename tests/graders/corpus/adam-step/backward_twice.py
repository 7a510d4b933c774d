# expect: backward-twice, score 4-4
def train_step(model, optimizer, loss_fn, x, y):
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward(retain_graph=True)
    loss.backward()  # to be sure the gradients are there
    optimizer.step()
    return loss.item()
