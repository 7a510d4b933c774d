import copy


def save(model, optimizer):
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict()}


def resume(model, optimizer, state):
    restored = copy.deepcopy(model)  # the bug: the weights go into a copy, not the model
    restored.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
