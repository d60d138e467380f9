"""A small PyTorch CNN on the shipped MNIST subset, as a diel search objective.

diel's ``worker`` module imports this file once per worker process (``run:
train.py:objective`` in search.yaml) and calls ``objective(trial)`` for every trial it is
handed. The function is plain Python: ``trial.params`` holds the sampled parameters,
``trial.report(epoch, ...)`` sends an epoch's validation metrics to the search master and
returns True once the master has pruned the trial (or asked it to pause),
``trial.checkpoint(state)`` keeps the trial's progress and ``trial.restore()`` gives it
back to a resumed trial, and ``trial.device`` is the GPU this process should use (None
without one).

Try it without diel or MPI::

    python -c "from diel.worker import Trial; import train; \
print(train.objective(Trial(params={'lr': 0.05, 'channels': 8, 'epochs': 2}, number=0, study='t')))"
"""

from __future__ import annotations

import functools
import os

import torch
from torch import nn

from trainer.data import load_mnist5k, prepare, split

# The worker copies of a search share the node's cores, one trial each: one thread per
# trial unless OMP_NUM_THREADS says otherwise (PyTorch reads that variable itself).
if "OMP_NUM_THREADS" not in os.environ:
    torch.set_num_threads(1)


@functools.lru_cache(maxsize=1)
def mnist() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The 5,000 shipped digits as (N, 1, 28, 28) float tensors: 4,000 to train, 1,000 to
    validate. Cached, so a worker process loads them once, not once per trial."""
    x, y = prepare(*load_mnist5k(), flatten=False)
    return tuple(torch.from_numpy(a) for a in split(x, y, n_train=4000))  # type: ignore[return-value]


def build(channels: int) -> nn.Module:
    """Two 3x3 convolutions with max pooling, then a linear layer to the 10 classes."""
    return nn.Sequential(
        nn.Conv2d(1, channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),              # 14x14
        nn.Conv2d(channels, 2 * channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),   # 7x7
        nn.Flatten(),
        nn.Linear(2 * channels * 7 * 7, 10),
    )


def device_of(trial) -> torch.device:
    """The trial's GPU when it has one and CUDA works, else the CPU."""
    if trial.device is not None and torch.cuda.is_available():
        return torch.device(f"cuda:{trial.device}")
    return torch.device("cpu")


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """Accuracy and mean cross-entropy loss of ``model`` on ``(x, y)``."""
    model.eval()
    logits = model(x)
    loss = nn.functional.cross_entropy(logits, y).item()
    accuracy = (logits.argmax(dim=1) == y).float().mean().item()
    return accuracy, loss


def objective(trial) -> dict[str, float]:
    """Train for ``epochs`` epochs with SGD (momentum 0.9), report validation accuracy and
    loss after each, checkpoint, and stop early when the search says so.

    Parameters (``trial.params``): ``lr`` (required), ``channels`` (8), ``epochs`` (3),
    ``batch_size`` (64), ``seed`` (0). Returns the last validation metrics; diel records
    the trial's wall time itself.

    After every epoch's report the trial checkpoints everything its next epoch depends
    on: the model's and the optimizer's state, the data order's generator and PyTorch's
    global RNG. A trial resumed after a crash, a wall-time stop or a pause restores them
    and goes on from the next epoch, bitwise as if it had never stopped.
    """
    params = trial.params
    lr = float(params["lr"])
    channels = int(params.get("channels", 8))
    epochs = int(params.get("epochs", 3))
    batch_size = int(params.get("batch_size", 64))
    seed = int(params.get("seed", 0))

    device = device_of(trial)
    x_train, y_train, x_val, y_val = (t.to(device) for t in mnist())
    torch.manual_seed(seed)
    model = build(channels).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    order = torch.Generator().manual_seed(seed)

    first, metrics = 1, {"accuracy": 0.0, "loss": float("nan")}
    saved = trial.restore()             # None unless this attempt resumes a checkpoint
    if saved is not None:
        step, state = saved
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        order.set_state(state["order"])
        torch.set_rng_state(state["rng"])
        first, metrics = step + 1, state["metrics"]

    for epoch in range(first, epochs + 1):
        model.train()
        for batch in torch.randperm(len(x_train), generator=order).split(batch_size):
            batch = batch.to(device)
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x_train[batch]), y_train[batch]).backward()
            optimizer.step()
        accuracy, loss = evaluate(model, x_val, y_val)
        metrics = {"accuracy": accuracy, "loss": loss}
        stop = trial.report(epoch, **metrics)   # pruned, or asked to pause
        trial.checkpoint({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                          "order": order.get_state(), "rng": torch.get_rng_state(),
                          "metrics": metrics})
        if stop:
            break                       # return what we have; a paused trial resumes later
    return metrics
