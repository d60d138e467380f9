"""The toy problem of benchmarks/pbt_bench.py: Ray Tune's PBT example, ported.

Ray Tune's ``python/ray/tune/examples/pbt_function.py`` (ray-project/ray, Apache-2.0)
defines a "toy PBT problem for benchmarking adaptive learning rate": a trial's accuracy
grows fastest when its learning rate is near an optimal one that depends on the accuracy
itself (a triangle: 0.001 at accuracy 0, 0.01 at the midpoint 100, back to 0.001 at 200),
so no fixed learning rate does well and a schedule found by PBT does. :func:`toy_step`
is its step, with the same constants and rules; the noise comes from a generator passed
in (Ray's draws from the global ``random`` and ``numpy.random``), so diel's members are
reproducible. Two departures, the same for every system measured: the budget is a fixed
number of steps (Ray's example also stops a trial once its accuracy passes 200), and a
step takes :data:`TOY_STEP_SECONDS` (a sleep before it; the score is Ray's). Ray's steps
take no time, and an asynchronous engine's members would then race through many steps
while one waits for its exploit, so the population would be compared at different points
of training; real training steps take time, and Ray Tune's function trainables are paced
by its driver at every report anyway. A member checkpoints every interval steps, as
Ray's example does (diel's: when ``trial.should_checkpoint`` says so).

Epochs trained are counted where they happen: every report of a member, including those
an exploit later supersedes, appends to a report file (:class:`Counted`,
:func:`count_reports`; the Ray Tune peer does the same in its trainables), and a search
given an epoch budget (successive halving's) stops each member at its next report once
the file holds that many, and a trial that starts after that returns at once, untrained
and unreported (``{"accuracy": 0.0}``: it never scores, not having trained the whole
length).

Imported by the diel side (:func:`toy_member`, a worker ``run:`` function) and by the Ray
Tune peer (benchmarks/peers/ray_pbt.py), so both run the same problem; no diel import.
:func:`state_member` and :func:`exploit_latencies` serve the benchmark's timing of a
whole exploit.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["MIDPOINT", "LR_BOUNDS", "TOY_STEP_SECONDS", "optimal_lr", "toy_step", "Counted",
           "count_reports", "note_report", "toy_member", "mlp_member", "state_member",
           "log_event", "exploit_latencies"]

MIDPOINT = 100        # the optimal learning rate rises up to this accuracy, then falls
Q_TOLERANCE = 3       # a learning rate more than this factor off the optimum gains nothing
NOISE_LEVEL = 2       # standard deviation of the Gaussian noise added each step
#: The learning rates Ray's example resamples from (``uniform(0.0001, 0.02)``).
LR_BOUNDS = (0.0001, 0.02)
#: Seconds a toy step takes in the benchmark (module docstring): 100 steps are 5 s a
#: member, so a search of 8 members stays well under a minute.
TOY_STEP_SECONDS = 0.05
#: What one report appends to a report file: fixed width, so the count is its size.
REPORT_MARK = b"1\n"


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


def note_report(path: str) -> int:
    """Append one report's mark to the report file ``path``; the reports it now holds
    (appends of a few bytes are atomic: members of several processes share the file)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, REPORT_MARK)
        return os.fstat(fd).st_size // len(REPORT_MARK)
    finally:
        os.close(fd)


def count_reports(path: str | Path) -> int:
    """Reports (epochs trained) the report file ``path`` holds; 0 when there is none."""
    try:
        return os.path.getsize(path) // len(REPORT_MARK)
    except FileNotFoundError:
        return 0


class Counted:
    """A diel trial whose every report is counted in the report file ``path``, and says
    stop once the file holds ``budget`` reports (None: no budget); all else is the
    trial's."""

    def __init__(self, trial: Any, path: str, budget: int | None = None) -> None:
        self._trial, self._path, self._budget = trial, path, budget

    def __getattr__(self, name: str) -> Any:
        return getattr(self._trial, name)

    @property
    def spent(self) -> bool:
        """Whether the budget is spent: the file holds ``budget`` reports."""
        return self._budget is not None and count_reports(self._path) >= self._budget

    def report(self, step: int, **metrics: Any) -> bool:
        reports = note_report(self._path)
        stop = self._trial.report(step, **metrics)
        return bool(stop) or (self._budget is not None and reports >= self._budget)


def counted(trial: Any) -> Any:
    """``trial`` counted in its ``reports`` file, under its ``budget`` when given, or
    ``trial`` itself without a ``reports`` parameter."""
    params = trial.params
    if "reports" not in params:
        return trial
    budget = params.get("budget")
    return Counted(trial, str(params["reports"]), None if budget is None else int(budget))


def toy_member(trial: Any) -> dict[str, float]:
    """diel ``run:`` function: a member of the toy problem.

    ``trial.params``: ``lr`` (PBT changes it), ``steps`` (the budget), ``seed``,
    ``step_seconds`` (a step's time, 0 by default), and optionally ``reports`` and
    ``budget`` (:func:`counted`). Restores ``(step, {"accuracy": a})`` at its start (its
    own checkpoint, or a donor's after an exploit), reports ``accuracy`` every step,
    checkpoints when ``trial.should_checkpoint`` (every PBT interval, or when the search
    asks it to pause), returns when a report says stop. Step ``k``'s noise is drawn from
    ``(seed, trial number, k)``.
    """
    trial = counted(trial)
    if isinstance(trial, Counted) and trial.spent:
        return {"accuracy": 0.0}
    params = trial.params
    lr, steps, seed = float(params["lr"]), int(params["steps"]), int(params.get("seed", 0))
    pause = float(params.get("step_seconds", 0.0))
    accuracy, first = 0.0, 1
    saved = trial.restore()
    if saved is not None:
        step, state = saved
        accuracy, first = float(state["accuracy"]), step + 1
    for step in range(first, steps + 1):
        time.sleep(pause)
        accuracy = toy_step(accuracy, lr, np.random.default_rng([seed, trial.number, step]))
        stop = trial.report(step, accuracy=accuracy)
        if trial.should_checkpoint:
            trial.checkpoint({"accuracy": accuracy})
        if stop:
            break
    return {"accuracy": accuracy}


def mlp_member(trial: Any) -> dict[str, float]:
    """diel ``run:`` function: examples/pbt/train.py's member (the trainer's MLP) with
    its reports counted (:func:`counted`)."""
    folder = str(Path(__file__).resolve().parent.parent / "examples" / "pbt")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    import train

    trial = counted(trial)
    if isinstance(trial, Counted) and trial.spent:
        return {"accuracy": 0.0}
    return train.objective(trial)


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
