# expect: not-started, score 0-0
import copy

import torch


def fit(model, optimizer, loss_fn, train_batches, val_batches, max_epochs, patience):
    losses = []  # one per epoch
    return losses
