# expect: backward-twice, score 2-4
def train_step(model, optimizer, loss_fn, x, y):
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward(retain_graph=True)
    print("grad norm:", model.weight.grad.norm().item())
    loss.backward()  # backward again to be sure the grads are there
    optimizer.step()
    return loss.item()
