# expect: correct, score 10-10
def accumulation_demo(model, loss_fn, x, y):
    # pass 1
    out = model(x)
    l1 = loss_fn(out, y)
    l1.backward()
    g1 = model.weight.grad.detach().clone()  # snapshot, .grad keeps changing

    # pass 2, NO zero_grad in between
    l2 = loss_fn(model(x), y)
    l2.backward()
    g2 = model.weight.grad.detach().clone()
    return g1, g2
