# expect: model-not-restored, score 5-5
from torch import nn


def save(model, optimizer):
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict()}


def resume(model, optimizer, state):
    optimizer.load_state_dict(state["optimizer"])
    restored = nn.Linear(model.in_features, model.out_features)
    restored.load_state_dict(state["model"])
    model = restored
