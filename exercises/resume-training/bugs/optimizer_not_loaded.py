def save(model, optimizer):
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict()}


def resume(model, optimizer, state):
    model.load_state_dict(state["model"])  # the bug: the optimizer's state is never loaded
