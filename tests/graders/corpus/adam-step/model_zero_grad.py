# expect: correct, score 10-10
def train_step(model, optimizer, loss_fn, x, y):
    model.zero_grad()
    prediction = model(x)
    loss = loss_fn(prediction, y)
    loss.backward()
    optimizer.step()
    return loss.item()
