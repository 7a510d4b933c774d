# expect: missing-no-grad, score 9-9
def evaluate(model, loss_fn, x, y):
    model.eval()
    loss = loss_fn(model(x), y)
    loss.backward()  # to "check" the gradients
    model.zero_grad()
    model.train()
    return loss.item()
