# expect: correct, score 10-10
from torch.nn.utils import clip_grad_norm_


def train_step(model, optimizer, loss_fn, x, y, max_norm):
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    clip_grad_norm_(model.parameters(), max_norm=max_norm, norm_type=2.0)
    optimizer.step()
    return loss.item()
