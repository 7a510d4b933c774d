# expect: missing-eval, score 4-4
def evaluate(model, loss_fn, x, y):
    predictions = model(x)
    loss = loss_fn(predictions, y)
    return loss.item()
