def save(model, optimizer):
    return {"model": model.state_dict()}  # the bug: the optimizer's state is not saved


def resume(model, optimizer, state):
    model.load_state_dict(state["model"])
