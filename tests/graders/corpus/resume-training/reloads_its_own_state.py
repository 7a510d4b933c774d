# expect: optimizer-state-lost, score 4-4
def save(model, optimizer):
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict()}


def resume(model, optimizer, state):
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(optimizer.state_dict())
