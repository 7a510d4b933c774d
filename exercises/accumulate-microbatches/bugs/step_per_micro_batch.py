def accumulated_step(model, optimizer, loss_fn, micro_batches):
    total = 0.0
    for x, y in micro_batches:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y) / len(micro_batches)
        loss.backward()
        optimizer.step()
        total += loss.item()
    return total
