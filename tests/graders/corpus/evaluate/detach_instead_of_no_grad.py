# expect: missing-no-grad, score 9-9
def evaluate(model, loss_fn, x, y):
    model.eval()
    predictions = model(x).detach()
    loss = loss_fn(predictions, y).item()
    model.train()
    return loss
