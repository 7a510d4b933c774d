# expect: not-started, score 0-0
def train(model, optimizer, scheduler, loss_fn, batches, epochs):
    """My loop."""
    results = []
    # TODO
    return results
