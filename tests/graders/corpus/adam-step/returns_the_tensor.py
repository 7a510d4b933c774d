# expect: wrong-return-type, score 9-9
def train_step(model, optimizer, loss_fn, x, y):
    optimizer.zero_grad()
    prediction = model(x)
    loss = loss_fn(prediction, y)
    loss.backward()
    optimizer.step()
    return loss  # the loss, as it is
