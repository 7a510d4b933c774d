# expect: not-started, score 0-0
def train_epoch(model, optimizer, loss_fn, loader):
    total, count = 0.0, 0
    # TODO: the epoch
    return 0.0
