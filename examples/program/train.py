"""A stand-alone training program: a one-hidden-layer network in NumPy on the shipped
MNIST subset. It knows nothing of diel; it only follows two conventions, so that diel
can run it as a search's trials (see search.yaml):

- after every epoch it appends one JSON line, ``{"step": 3, "accuracy": 0.91, "loss":
  0.3}``, to the file named by ``$DIEL_REPORT_FILE``: the search sees its progress and
  can prune it (diel then stops the program with SIGTERM);
- at the end it writes its final metrics, a JSON object, to ``$DIEL_RESULT_FILE``;
- after every epoch's line it saves its weights and random generator to the folder
  ``$DIEL_CHECKPOINT_DIR`` and appends ``{"checkpoint": 3}``: diel keeps those files as
  the trial's checkpoint of that epoch. A resumed trial finds them there again, with the
  epoch in ``$DIEL_RESTORE_STEP``, and goes on from the next epoch. When the search
  pauses the trial (a wall-time stop), diel sends SIGUSR1: the program finishes its
  epoch, checkpoints and exits.

Without those variables (run by hand) it prints the same lines instead::

    python train.py --lr 0.05 --hidden 64 --epochs 5
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

import numpy as np

from trainer.data import load_mnist5k, prepare, split


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="train a small NumPy MLP on the MNIST subset")
    parser.add_argument("--lr", type=float, required=True, help="SGD learning rate")
    parser.add_argument("--hidden", type=int, default=64, help="hidden units (default 64)")
    parser.add_argument("--epochs", type=int, default=6, help="passes over the data (default 6)")
    parser.add_argument("--batch-size", type=int, default=32, help="minibatch size (default 32)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    return parser.parse_args(argv)


def emit(path: str | None, record: dict, mode: str) -> None:
    """Write ``record`` as JSON to ``path`` (``mode`` "a": one more line), or print it."""
    line = json.dumps(record)
    if path:
        with open(path, mode, encoding="utf-8") as f:
            f.write(line + "\n")
    else:
        print(line, flush=True)


def softmax_loss(logits: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean cross-entropy of ``logits`` against labels ``y``, and its gradient."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    probs = np.exp(shifted)
    probs /= probs.sum(axis=1, keepdims=True)
    loss = -np.log(probs[np.arange(len(y)), y] + 1e-12).mean()
    probs[np.arange(len(y)), y] -= 1
    return float(loss), probs / len(y)


def save(folder: str, epoch: int, weights: dict[str, np.ndarray], rng: np.random.Generator,
         metrics: dict[str, float]) -> None:
    """Write the state the next epoch depends on to ``folder``: the weights (one ``.npy``
    file each, written in place, so a checkpoint's files replace the last one's) and the
    generator's state with the epoch and its metrics (``state.json``)."""
    for name, array in weights.items():
        np.save(os.path.join(folder, f"{name}.npy"), array)
    with open(os.path.join(folder, "state.json"), "w", encoding="utf-8") as f:
        json.dump({"epoch": epoch, "rng": rng.bit_generator.state, "metrics": metrics}, f)


def load(folder: str, weights: dict[str, np.ndarray], rng: np.random.Generator
         ) -> tuple[int, dict[str, float]]:
    """Read back what :func:`save` wrote into ``weights`` and ``rng``; the epoch saved
    and its metrics."""
    for name, array in weights.items():
        array[...] = np.load(os.path.join(folder, f"{name}.npy"))
    with open(os.path.join(folder, "state.json"), encoding="utf-8") as f:
        state = json.load(f)
    rng.bit_generator.state = state["rng"]
    return state["epoch"], state["metrics"]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    report_file = os.environ.get("DIEL_REPORT_FILE")
    result_file = os.environ.get("DIEL_RESULT_FILE")
    checkpoint_dir = os.environ.get("DIEL_CHECKPOINT_DIR")
    paused: list[bool] = []   # SIGUSR1: checkpoint at the end of this epoch and exit
    signal.signal(signal.SIGUSR1, lambda *_: paused.append(True))
    started = time.perf_counter()

    x, y = prepare(*load_mnist5k())
    x_train, y_train, x_val, y_val = split(x, y, n_train=4000)
    rng = np.random.default_rng(args.seed)
    w1 = rng.normal(0, np.sqrt(2 / x.shape[1]), (x.shape[1], args.hidden)).astype(np.float32)
    b1 = np.zeros(args.hidden, np.float32)
    w2 = rng.normal(0, np.sqrt(1 / args.hidden), (args.hidden, 10)).astype(np.float32)
    b2 = np.zeros(10, np.float32)

    def forward(inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        hidden = np.maximum(inputs @ w1 + b1, 0)
        return hidden, hidden @ w2 + b2

    weights = {"w1": w1, "b1": b1, "w2": w2, "b2": b2}
    first, metrics = 1, {}
    if checkpoint_dir and os.environ.get("DIEL_RESTORE_STEP"):   # a resumed trial
        done, metrics = load(checkpoint_dir, weights, rng)
        first = done + 1
    for epoch in range(first, args.epochs + 1):
        for batch in np.array_split(rng.permutation(len(x_train)),
                                    max(1, len(x_train) // args.batch_size)):
            inputs = x_train[batch]
            hidden, logits = forward(inputs)
            _, grad = softmax_loss(logits, y_train[batch])
            grad_hidden = (grad @ w2.T) * (hidden > 0)
            w2 -= args.lr * (hidden.T @ grad)
            b2 -= args.lr * grad.sum(axis=0)
            w1 -= args.lr * (inputs.T @ grad_hidden)
            b1 -= args.lr * grad_hidden.sum(axis=0)
        _, logits = forward(x_val)
        loss, _ = softmax_loss(logits, y_val)
        metrics = {"accuracy": float((logits.argmax(axis=1) == y_val).mean()), "loss": loss}
        emit(report_file, {"step": epoch, **metrics}, "a")
        if checkpoint_dir:
            save(checkpoint_dir, epoch, weights, rng, metrics)
            emit(report_file, {"checkpoint": epoch}, "a")
            if paused:
                sys.exit(0)

    emit(result_file, {**metrics, "time": time.perf_counter() - started}, "w")


if __name__ == "__main__":
    main()
