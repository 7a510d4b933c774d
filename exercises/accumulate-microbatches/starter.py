def accumulated_step(model, optimizer, loss_fn, micro_batches):
    """One optimizer step on all micro-batches together; return their mean loss as a float."""
    total = 0.0
    for x, y in micro_batches:
        loss = loss_fn(model(x), y)
        total += loss.item()
    return total / len(micro_batches)
