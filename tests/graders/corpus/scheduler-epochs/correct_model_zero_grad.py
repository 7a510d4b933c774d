# expect: correct, score 10-10
def train(model, optimizer, scheduler, loss_fn, batches, epochs):
    means = []
    for epoch in range(epochs):
        running = 0.0
        for step, (x, y) in enumerate(batches):
            model.zero_grad()
            out = model(x)
            loss = loss_fn(out, y)
            loss.backward()
            optimizer.step()
            running += float(loss)
        means.append(running / len(batches))
        scheduler.step()  # once per epoch, after the optimizer
    return means
