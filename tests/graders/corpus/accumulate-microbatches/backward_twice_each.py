# expect: backward-twice, score 2-4
def accumulated_step(model, optimizer, loss_fn, micro_batches):
    optimizer.zero_grad()
    total = 0.0
    for x, y in micro_batches:
        loss = loss_fn(model(x), y) / len(micro_batches)
        loss.backward(retain_graph=True)
        total += loss.item()
    for x, y in micro_batches:  # second pass "to accumulate"
        loss = loss_fn(model(x), y) / len(micro_batches)
        loss.backward()
    optimizer.step()
    return total
