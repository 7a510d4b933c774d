def save(model, optimizer):
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict()}


def resume(model, optimizer, state):
    optimizer.load_state_dict(state["optimizer"])  # the bug: the weights are never loaded
