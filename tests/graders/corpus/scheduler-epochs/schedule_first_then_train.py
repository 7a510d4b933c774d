# expect: scheduler-before-optimizer, score 3-3
def train(model, optimizer, scheduler, loss_fn, batches, epochs):
    history = []
    for epoch in range(epochs):
        scheduler.step()
        print("epoch", epoch, "lr", scheduler.get_last_lr())
        total = 0.0
        for x, y in batches:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            total += loss.item()
        history.append(total / len(batches))
    return history
