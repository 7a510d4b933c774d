# expect: optimizer-state-lost, score 4-4
import torch


def save(model, optimizer):
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict()}


def resume(model, optimizer, state):
    model.load_state_dict(state["model"])
    group = optimizer.param_groups[0]
    optimizer = torch.optim.SGD(model.parameters(), lr=group["lr"], momentum=group["momentum"])
    optimizer.load_state_dict(state["optimizer"])
