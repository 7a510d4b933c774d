# expect: zero-grad-skipped, score 2-4
step_count = 0


def train_step(model, optimizer, loss_fn, x, y):
    global step_count
    step_count += 1
    if step_count % 2 == 1:
        optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.item()
