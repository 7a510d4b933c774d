# expect: zero-grad-inside-accumulation, score 2-4
def accumulated_step(model, optimizer, loss_fn, micro_batches):
    total = 0.0
    for i, (x, y) in enumerate(micro_batches):
        optimizer.zero_grad()  # fresh gradients for each micro-batch
        loss = loss_fn(model(x), y) / len(micro_batches)
        loss.backward()
        total += loss.item()
    optimizer.step()
    return total
