# expect: step-before-backward, score 2-4
def train(model, optimizer, loss_fn, batches, epochs):
    record = []
    for epoch in range(epochs):
        for batch in batches:
            inputs, labels = batch
            model.zero_grad()  # fixed: clear first
            loss = loss_fn(model(inputs), labels)
            optimizer.step()
            loss.backward()
            record.append(float(loss))
    return record
