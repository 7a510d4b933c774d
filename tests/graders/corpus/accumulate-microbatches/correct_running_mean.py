# expect: correct, score 10-10
def accumulated_step(model, optimizer, loss_fn, micro_batches):
    n = len(micro_batches)
    optimizer.zero_grad()
    running = 0.0
    for inputs, targets in micro_batches:
        loss = loss_fn(model(inputs), targets) / n  # scale so the sum is the mean
        loss.backward()  # grads add up in .grad
        running += loss.item()
    optimizer.step()
    return running
