"""The trainer's MLP on the shipped MNIST subset, as a population-based training member.

diel's ``worker`` module imports this file once per worker process (``run:
train.py:objective`` in search.yaml) and calls ``objective(trial)`` for every member it
is handed, and again each time population-based training (PBT) moves a member on:

* ``trial.params`` holds the member's *current* ``learning_rate`` and ``momentum``
  (PBT changes them between calls: an exploit copies a better member's weights and
  perturbs its parameters);
* ``trial.restore()`` gives back the state to go on from: the member's own latest
  checkpoint (a crash, a pause), or after an exploit the *donor's* latest checkpoint,
  moved from the donor's rank through the tuple space. The state holds weights and
  momentum buffers only: the learning rate and momentum come from ``trial.params``, so
  an exploited member trains on with its new parameters;
* ``trial.report(epoch, ...)`` after every epoch; True means stop now (PBT decided to
  exploit, or the search pruned or paused the member): checkpoint, then return;
* ``trial.checkpoint(state)`` after every report, so the latest state is there for a
  resume and for any member that exploits this one.

The data order of epoch ``e`` is drawn from ``(seed, e)`` alone, so a member resumed at
epoch ``k`` sees the batches an uninterrupted run would have seen: with the same
parameters, resuming is bitwise the same as never stopping.

Try it without diel or MPI::

    python -c "from diel.worker import Trial; import train; \
print(train.objective(Trial(params={'learning_rate': 0.05, 'momentum': 0.9, 'epochs': 2}, number=0, study='t')))"
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from trainer import NeuralNetwork, build_model, load_mnist5k, prepare, split, to_numpy

Dataset = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@functools.lru_cache(maxsize=1)
def mnist() -> Dataset:
    """The 5,000 shipped digits, flattened: 4,000 to train, 1,000 to validate. Cached, so a
    worker process loads them once, not once per member."""
    return split(*prepare(*load_mnist5k()), n_train=4000)


def build(params: dict[str, Any]) -> NeuralNetwork:
    """The trainer's MLP (``hidden`` sizes, ReLU, softmax) with SGD at the member's
    current ``learning_rate`` and ``momentum``; shuffling is ours (:func:`objective`)."""
    return build_model({"hidden": list(params.get("hidden", [128])), "activation": "relu",
                        "optimizer": "sgd", "learning_rate": float(params["learning_rate"]),
                        "momentum": float(params["momentum"]),
                        "batch_size": int(params.get("batch_size", 100)),
                        "seed": int(params.get("seed", 0)), "shuffle": False, "device": "cpu"})


def state_of(model: NeuralNetwork) -> dict[str, Any]:
    """What the next epoch depends on besides the parameters: the weights (one fused
    array) and SGD's momentum buffer of each weight (None before the first step)."""
    return {"weights": to_numpy(model.updater.flat_params),
            "velocity": [None if "velocity" not in slot else to_numpy(slot["velocity"])
                         for slot in model.optimizer.states]}


def load_state(model: NeuralNetwork, state: dict[str, Any]) -> None:
    """Put a checkpoint's weights and momentum buffers into ``model`` (copies: the
    checkpoint's arrays may be read-only views of the bytes it came in)."""
    model.updater.flat_params[...] = model.xp.asarray(state["weights"])
    model.optimizer.states = [{} if velocity is None else {"velocity": model.xp.array(velocity)}
                              for velocity in state["velocity"]]


def objective(trial: Any) -> dict[str, float]:
    """Train for ``epochs`` epochs (counted from the start of the member's life, across
    exploits), report validation accuracy and loss after each, checkpoint, and return
    when the search says so.

    Parameters (``trial.params``): ``learning_rate`` and ``momentum`` (required; PBT
    changes them), ``epochs`` (8), ``batch_size`` (100), ``hidden`` ([128]), ``seed`` (0).
    Returns the last validation metrics.
    """
    params = trial.params
    epochs = int(params.get("epochs", 8))
    seed = int(params.get("seed", 0))
    x_train, y_train, x_val, y_val = mnist()
    model = build(params)

    first, metrics = 1, {"accuracy": 0.0, "loss": float("nan")}
    saved = trial.restore()        # None for a new member; else (step, state), maybe a donor's
    if saved is not None:
        step, state = saved
        load_state(model, state["model"])
        first, metrics = step + 1, state["metrics"]

    for epoch in range(first, epochs + 1):
        order = np.random.default_rng([seed, epoch]).permutation(len(x_train))
        model.fit(x_train[order], y_train[order], epochs=1)
        loss, accuracy = model.evaluate(x_val, y_val)
        metrics = {"accuracy": accuracy, "loss": loss}
        stop = trial.report(epoch, **metrics)   # exploit, prune or pause: stop after the checkpoint
        trial.checkpoint({"model": state_of(model), "metrics": metrics})
        if stop:
            break
    return metrics
