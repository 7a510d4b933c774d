# expect: correct, score 10-10
def save(model, optimizer):
    checkpoint = dict()
    checkpoint["epoch"] = 0
    checkpoint["model_state_dict"] = model.state_dict()
    checkpoint["optimizer_state_dict"] = optimizer.state_dict()
    return checkpoint


def resume(model, optimizer, state):
    optimizer.load_state_dict(state["optimizer_state_dict"])
    model.load_state_dict(state["model_state_dict"])
    return state["epoch"]
