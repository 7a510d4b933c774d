def save(model, optimizer):
    """Return a dict holding everything needed to resume training later."""
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict()}


def resume(model, optimizer, state):
    """Load `state`, made by save(), into this model and this optimizer."""
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
