# expect: correct, score 10-10
def train_step(model, optimizer, loss_fn, x, y):
    model.zero_grad()  # 1. zero
    predictions = model(x)
    loss = loss_fn(predictions, y)
    loss.backward()  # 2. backward
    optimizer.step()  # 3. step
    return loss.item()
