"""The toy problem of benchmarks/pbt_bench.py: Ray Tune's PBT example, ported.

Ray Tune's ``python/ray/tune/examples/pbt_function.py`` (ray-project/ray, Apache-2.0)
defines a "toy PBT problem for benchmarking adaptive learning rate": a trial's accuracy
grows fastest when its learning rate is near an optimal one that depends on the accuracy
itself (a triangle: 0.001 at accuracy 0, 0.01 at the midpoint 100, back to 0.001 at 200),
so no fixed learning rate does well and a schedule found by PBT does. :func:`toy_step`
is its step, with the same constants and rules; the noise comes from a generator passed
in (Ray's draws from the global ``random`` and ``numpy.random``), so diel's members are
reproducible. One departure, the same for every system measured: the budget is a fixed
number of steps (Ray's example also stops a trial once its accuracy passes 200). A
member checkpoints every interval steps, as Ray's example does (diel's: when
``trial.should_checkpoint`` says so).

Imported by the diel side (:func:`toy_member`, a worker ``run:`` function) and by the Ray
Tune peer (benchmarks/peers/ray_pbt.py), so both run the same problem; no diel import.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["MIDPOINT", "LR_BOUNDS", "optimal_lr", "toy_step", "toy_member"]

MIDPOINT = 100        # the optimal learning rate rises up to this accuracy, then falls
Q_TOLERANCE = 3       # a learning rate more than this factor off the optimum gains nothing
NOISE_LEVEL = 2       # standard deviation of the Gaussian noise added each step
#: The learning rates Ray's example resamples from (``uniform(0.0001, 0.02)``).
LR_BOUNDS = (0.0001, 0.02)


def optimal_lr(accuracy: float) -> float:
    """The triangle wave: 0.01 * accuracy / 100 up to the midpoint, then down, within
    [0.001, 0.01]."""
    if accuracy < MIDPOINT:
        best = 0.01 * accuracy / MIDPOINT
    else:
        best = 0.01 - 0.01 * (accuracy - MIDPOINT) / MIDPOINT
    return min(0.01, max(0.001, best))


def toy_step(accuracy: float, lr: float, rng: np.random.Generator) -> float:
    """One training step of Ray's toy: the accuracy after it."""
    best = optimal_lr(accuracy)
    q_err = max(lr, best) / min(lr, best)
    if q_err < Q_TOLERANCE:
        accuracy += (1.0 / q_err) * rng.random()
    elif lr > best:
        accuracy -= (q_err - Q_TOLERANCE) * rng.random()
    accuracy += NOISE_LEVEL * rng.normal()
    return max(0.0, accuracy)


def toy_member(trial: Any) -> dict[str, float]:
    """diel ``run:`` function: a member of the toy problem.

    ``trial.params``: ``lr`` (PBT changes it), ``steps`` (the budget), ``seed``.
    Restores ``(step, {"accuracy": a})`` at its start (its own checkpoint, or a donor's
    after an exploit), reports ``accuracy`` every step, checkpoints when
    ``trial.should_checkpoint`` (every PBT interval, or when the search asks it to pause),
    returns when a report says stop. Step ``k``'s noise is drawn from ``(seed, trial
    number, k)``.
    """
    params = trial.params
    lr, steps, seed = float(params["lr"]), int(params["steps"]), int(params.get("seed", 0))
    accuracy, first = 0.0, 1
    saved = trial.restore()
    if saved is not None:
        step, state = saved
        accuracy, first = float(state["accuracy"]), step + 1
    for step in range(first, steps + 1):
        accuracy = toy_step(accuracy, lr, np.random.default_rng([seed, trial.number, step]))
        stop = trial.report(step, accuracy=accuracy)
        if trial.should_checkpoint:
            trial.checkpoint({"accuracy": accuracy})
        if stop:
            break
    return {"accuracy": accuracy}
