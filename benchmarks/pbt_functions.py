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
:func:`state_member` and :func:`exploit_latencies` serve the benchmark's timing of a
whole exploit.
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np

__all__ = ["MIDPOINT", "LR_BOUNDS", "optimal_lr", "toy_step", "toy_member", "state_member",
           "log_event", "exploit_latencies"]

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


#: Seconds a step of :func:`state_member` "trains" (sleeps), for the exploit benchmark.
STEP_SECONDS = 0.2


def log_event(path: str, member: Any, what: str) -> None:
    """Append ``{"member", what: time}`` to the JSON-lines file ``path``: the whole-exploit
    timings of benchmarks/pbt_bench.py, written by the members of both systems."""
    with open(path, "a") as f:
        f.write(json.dumps({"member": member, what: time.time()}) + "\n")


def state_member(trial: Any) -> dict[str, float]:
    """diel ``run:`` function for the whole-exploit timing: a member whose state is
    ``mib`` MiB (benchmarks/checkpoint_state.py) and whose score is its parameter ``x``,
    so the lowest ``x`` exploits the highest at each interval. Logs the time before each
    report (``report``) and, in a run that restored a state, the time it is loaded
    (``ready``), to the file ``log``; an exploit's latency is the ``ready`` of a member's
    run minus its last ``report`` before it."""
    from checkpoint_state import make_state   # torch: only for this member

    params = trial.params
    log, x = str(params["log"]), float(params["x"])
    first, saved = 1, trial.restore()
    if saved is not None:
        step, state = saved
        log_event(log, trial.number, "ready")
        first = step + 1
    else:
        state = make_state(int(params["mib"]))
    for step in range(first, int(params["steps"]) + 1):
        time.sleep(STEP_SECONDS)
        log_event(log, trial.number, "report")
        stop = trial.report(step, accuracy=x)
        if trial.should_checkpoint:
            trial.checkpoint(state)
        if stop:
            break
    return {"accuracy": x}


def exploit_latencies(path: str) -> list[float]:
    """Seconds from a member's last report to its next ``ready``, for every ``ready`` in
    the JSON-lines file ``path`` (:func:`log_event`)."""
    last: dict[Any, float] = {}
    latencies = []
    events = [json.loads(line) for line in open(path).read().splitlines()]
    for event in sorted(events, key=lambda e: e.get("report", e.get("ready"))):
        if "report" in event:
            last[event["member"]] = event["report"]
        elif event["member"] in last:
            latencies.append(event["ready"] - last[event["member"]])
    return latencies
