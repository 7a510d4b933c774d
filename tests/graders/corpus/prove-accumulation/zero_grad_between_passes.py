# expect: cleared-between-passes, score 7-9
def accumulation_demo(model, loss_fn, x, y):
    grads = []
    for _ in range(2):
        model.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        grads.append(model.weight.grad.clone())
    return grads[0], grads[1]
