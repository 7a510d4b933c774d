# expect: wrong-return-type, score 9-9
def save(model, optimizer):
    return model.state_dict(), optimizer.state_dict()


def resume(model, optimizer, state):
    weights, optimizer_state = state
    model.load_state_dict(weights)
    optimizer.load_state_dict(optimizer_state)
