"""The PyTorch variant of train.py: the same MLP on the shipped MNIST subset, in PyTorch, as a
population-based training member (``run: train_torch.py:objective`` in search_torch.yaml).

What PBT asks of the function is the same as in train.py: take ``learning_rate`` and
``momentum`` from ``trial.params`` (they change between calls), go on from
``trial.restore()`` (the member's own checkpoint, or a donor's after an exploit),
report every epoch, checkpoint after each report, return when a report says stop.

One PyTorch pitfall: ``optimizer.load_state_dict`` restores the *saved* learning rate
and momentum with the momentum buffers, which after an exploit are the donor's old ones.
:func:`objective` sets the member's current values on the optimizer after loading, so
the perturbed parameters take effect.

Try it without diel or MPI::

    python -c "from diel.worker import Trial; import train_torch; \
print(train_torch.objective(Trial(params={'learning_rate': 0.05, 'momentum': 0.9, 'epochs': 2}, number=0, study='t')))"
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch
from torch import nn

from trainer.data import load_mnist5k, prepare, split

# The worker copies share the node's cores, one member each: one thread per member unless
# OMP_NUM_THREADS says otherwise (PyTorch reads that variable itself).
if "OMP_NUM_THREADS" not in os.environ:
    torch.set_num_threads(1)


@functools.lru_cache(maxsize=1)
def mnist() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The 5,000 shipped digits, flattened, as tensors: 4,000 to train, 1,000 to validate.
    Cached, so a worker process loads them once."""
    x, y = prepare(*load_mnist5k())
    return tuple(torch.from_numpy(a) for a in split(x, y, n_train=4000))  # type: ignore[return-value]


def build(hidden: list[int]) -> nn.Module:
    """The trainer's MLP in PyTorch: fully connected ``hidden`` layers with ReLU, then 10 logits."""
    layers: list[nn.Module] = []
    width = 784
    for units in hidden:
        layers += [nn.Linear(width, units), nn.ReLU()]
        width = units
    return nn.Sequential(*layers, nn.Linear(width, 10))


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """Accuracy and mean cross-entropy loss of ``model`` on ``(x, y)``."""
    logits = model(x)
    return ((logits.argmax(dim=1) == y).float().mean().item(),
            nn.functional.cross_entropy(logits, y).item())


def objective(trial: Any) -> dict[str, float]:
    """Train for ``epochs`` epochs (counted from the start of the member's life, across
    exploits) with SGD at the member's current ``learning_rate`` and ``momentum``,
    report validation accuracy and loss after each, checkpoint, and return when the
    search says so.

    Parameters (``trial.params``): ``learning_rate`` and ``momentum`` (required),
    ``epochs`` (8), ``batch_size`` (100), ``hidden`` ([128]), ``seed`` (0).
    """
    params = trial.params
    lr, momentum = float(params["learning_rate"]), float(params["momentum"])
    epochs = int(params.get("epochs", 8))
    batch_size = int(params.get("batch_size", 100))
    seed = int(params.get("seed", 0))

    x_train, y_train, x_val, y_val = mnist()
    torch.manual_seed(seed)
    model = build(list(params.get("hidden", [128])))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    order = torch.Generator().manual_seed(seed)

    first, metrics = 1, {"accuracy": 0.0, "loss": float("nan")}
    saved = trial.restore()        # None for a new member; else (step, state), maybe a donor's
    if saved is not None:
        step, state = saved
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        for group in optimizer.param_groups:   # the member's parameters, not the saved ones
            group["lr"], group["momentum"] = lr, momentum
        order.set_state(state["order"])
        first, metrics = step + 1, state["metrics"]

    for epoch in range(first, epochs + 1):
        for batch in torch.randperm(len(x_train), generator=order).split(batch_size):
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x_train[batch]), y_train[batch]).backward()
            optimizer.step()
        accuracy, loss = evaluate(model, x_val, y_val)
        metrics = {"accuracy": accuracy, "loss": loss}
        stop = trial.report(epoch, **metrics)   # exploit, prune or pause: stop after the checkpoint
        trial.checkpoint({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                          "order": order.get_state(), "metrics": metrics})
        if stop:
            break
    return metrics
