# expect: zero-grad-before-step, score 2-4
def train(model, optimizer, loss_fn, batches, epochs):
    out = []
    for epoch in range(epochs):
        for x, y in batches:
            loss = loss_fn(model(x), y)
            loss.backward()
            model.zero_grad()
            optimizer.step()
            out.append(loss.item())
    return out
