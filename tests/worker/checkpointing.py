"""An objective function that keeps its progress, for the checkpoint tests (loaded in the
rank, and by an isolated child from this file)."""

from __future__ import annotations

import numpy as np

SIZE = 2048   # float64s: 16 kB, large enough to travel out of band


def counting(trial):
    """Adds 1 to every weight each epoch, up to ``epochs``; resumes from its checkpoint.
    Returns the step it resumed from (-1: from scratch), the weights' sum and the epoch."""
    first, weights, resumed = 1, np.zeros(SIZE), -1
    if (saved := trial.restore()) is not None:
        resumed, state = saved
        weights, first = state["weights"], resumed + 1
    epoch = first - 1
    for epoch in range(first, trial.params["epochs"] + 1):
        weights = weights + 1
        stop = trial.report(epoch, total=float(weights.sum()))
        trial.checkpoint({"weights": weights})
        if stop:
            break
    return {"resumed": resumed, "total": float(weights.sum()), "epoch": epoch}
