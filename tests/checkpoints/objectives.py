"""A seeded CPU model of the PyTorch example's kind for the checkpoint tests: a softmax
regression trained by SGD with momentum on fixed synthetic data, whose every epoch
depends on the weights, the momentum and the data order's generator, so a resume that
forgot any of them would not end bitwise equal to an uninterrupted run.

``sgd`` checkpoints after each epoch's report, resumes from ``trial.restore()``, and
appends one line a trained epoch (trial, epoch, the process) to the file ``log``, so a
test can tell which epochs were trained, and how often.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np

FEATURES, CLASSES, SAMPLES = 32, 4, 512


def data() -> tuple[np.ndarray, np.ndarray]:
    """The same inputs and labels on every call and in every process."""
    rng = np.random.default_rng(1234)
    x = rng.normal(size=(SAMPLES, FEATURES))
    y = (x[:, :CLASSES] + 0.5 * rng.normal(size=(SAMPLES, CLASSES))).argmax(axis=1)
    return x, y


def one_epoch(weights: np.ndarray, momentum: np.ndarray, order: np.random.Generator,
              x: np.ndarray, y: np.ndarray, lr: float) -> float:
    """One pass of minibatch SGD with momentum, in place; the epoch's mean loss."""
    losses = []
    for batch in np.array_split(order.permutation(len(x)), 16):
        logits = x[batch] @ weights
        logits -= logits.max(axis=1, keepdims=True)
        probs = np.exp(logits)
        probs /= probs.sum(axis=1, keepdims=True)
        losses.append(-np.log(probs[np.arange(len(batch)), y[batch]]).mean())
        probs[np.arange(len(batch)), y[batch]] -= 1
        momentum *= 0.9
        momentum += x[batch].T @ probs / len(batch)
        weights -= lr * momentum
    return float(np.mean(losses))


def sgd(trial) -> dict:
    """``epochs`` epochs (default 6) of ``lr`` (default 0.1), ``sleep`` s more each."""
    params = trial.params
    lr, epochs = float(params.get("lr", 0.1)), int(params.get("epochs", 6))
    x, y = data()
    weights = np.zeros((FEATURES, CLASSES))
    momentum = np.zeros_like(weights)
    order = np.random.default_rng(int(params.get("seed", 0)))
    first, metrics = 1, {}
    saved = trial.restore()
    if saved is not None:
        step, state = saved
        weights[...], momentum[...] = state["weights"], state["momentum"]
        order.bit_generator.state = state["order"]
        first, metrics = step + 1, state["metrics"]
    for epoch in range(first, epochs + 1):
        loss = one_epoch(weights, momentum, order, x, y, lr)
        time.sleep(float(params.get("sleep", 0)))
        metrics = {"loss": loss, "accuracy": float(((x @ weights).argmax(axis=1) == y).mean())}
        _log(params["log"], {"trial": trial.number, "epoch": epoch, "pid": os.getpid()})
        stop = trial.report(epoch, **metrics)
        trial.checkpoint({"weights": weights, "momentum": momentum,
                          "order": order.bit_generator.state, "metrics": metrics})
        if stop:
            break
    return metrics


def _log(path: str, record: dict) -> None:
    """Append one JSON line to ``path`` in one write (several processes share it)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(descriptor, (json.dumps(record) + "\n").encode())
    finally:
        os.close(descriptor)
