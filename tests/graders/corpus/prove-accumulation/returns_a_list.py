# expect: wrong-return-type, score 4-6
def accumulation_demo(model, loss_fn, x, y):
    results = []
    for i in range(2):
        loss_fn(model(x), y).backward()
        results.append(model.weight.grad.clone())
    return results
