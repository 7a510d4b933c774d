# expect: optimizer-state-lost, score 4-4
def save(model, optimizer):
    return {name: value.clone() for name, value in model.state_dict().items()}


def resume(model, optimizer, state):
    model.load_state_dict(state)
