# expect: correct, score 10-10
import copy


def save(model, optimizer):
    return {
        "weights": copy.deepcopy(model.state_dict()),
        "optim": copy.deepcopy(optimizer.state_dict()),
    }


def resume(model, optimizer, state):
    model.load_state_dict(state["weights"])
    optimizer.load_state_dict(state["optim"])
