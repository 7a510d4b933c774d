# expect: not-started, score 0-0
def save(model, optimizer):
    checkpoint = {}
    return checkpoint


def resume(model, optimizer, state):
    pass
