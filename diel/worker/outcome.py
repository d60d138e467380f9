"""How one trial ended, and the result report the master receives for it."""

from __future__ import annotations

import signal
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from diel.limits import ERROR_CHARS, clip
from diel.worker.trial import Trial, TrialTimedOut, is_prune, metrics_of_return

__all__ = ["TrialOutcome", "run_objective", "error_text", "death_reason",
           "timed_out", "result_report"]

RESULT_KEYS = ("time", "accuracy", "loss")


@dataclass
class TrialOutcome:
    """``status`` is ok, failed, pruned or paused (stopped at the master's request to
    keep its progress: resumed later from its checkpoint); ``metrics`` the last or returned metrics;
    ``value`` the objective's value when the function returned one number; ``error``
    why a failed trial failed, clipped to :data:`~diel.limits.ERROR_CHARS` characters
    however it was made; ``step`` the last step reported."""

    status: str
    metrics: dict[str, Any] = field(default_factory=dict)
    value: float | None = None
    error: str | None = None
    step: int = 0

    def __post_init__(self) -> None:
        if self.error is not None:
            self.error = clip(self.error, ERROR_CHARS)


def run_objective(function: Callable[[Trial], Any], trial: Trial) -> TrialOutcome:
    """Call ``function(trial)``; every way it can end in Python becomes an TrialOutcome.

    An exception (or ``sys.exit``) is a failed trial with its text; the caller goes on.
    A trial that ends after a pause request (returning, or raising
    :class:`TrialPruned` or ``optuna.TrialPruned``) is ``paused``; after a prune order,
    or raising either of those, ``pruned``. The trial's user attributes
    (``trial.set_user_attr``) join its metrics.
    """
    try:
        metrics, value = metrics_of_return(function(trial))
    except TrialTimedOut as e:
        return TrialOutcome("failed", {**trial.last_metrics, **trial.user_attrs}, error=str(e),
                            step=trial.last_step)
    except (Exception, SystemExit) as e:   # the trial failed, or pruned itself
        last = {**trial.last_metrics, **trial.user_attrs}
        if is_prune(e):
            return TrialOutcome(_stopped_status(trial), last, step=trial.last_step)
        return TrialOutcome("failed", last, error=error_text(e), step=trial.last_step)
    status = _stopped_status(trial) if trial.should_prune() or trial.should_pause else "ok"
    return TrialOutcome(status, {**trial.last_metrics, **trial.user_attrs, **metrics}, value,
                        step=trial.last_step)


def _stopped_status(trial: Trial) -> str:
    """The status of a trial that ended early: ``paused`` after a pause request, else
    ``pruned`` (an order to prune, or the trial's own :class:`TrialPruned`)."""
    return "paused" if trial.should_pause else "pruned"


def error_text(error: BaseException) -> str:
    """``Type: message (at file:line)`` of an exception raised by a trial, clipped to
    :data:`~diel.limits.ERROR_CHARS` characters (a message may hold a whole data set)."""
    if isinstance(error, SystemExit):
        return clip(f"the trial called sys.exit({error.code!r})", ERROR_CHARS)
    frames = traceback.extract_tb(error.__traceback__)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return clip(f"{type(error).__name__}: {error}{where}", ERROR_CHARS)


def death_reason(returncode: int) -> str:
    """Why a trial's process ended, from its return code (negative: a signal)."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        hint = " (also how the kernel ends a process out of memory)" if name == "SIGKILL" else ""
        return f"killed by {name}{hint}"
    return f"the trial's process exited with status {returncode}"


def timed_out(timeout: float) -> str:
    """The error text of a trial stopped at its timeout."""
    return f"timed out after {timeout:g} s"


def result_report(number: int, copy: int, outcome: TrialOutcome, started: float) -> dict[str, Any]:
    """The ``{"kind": "result", ...}`` report for the master (docs/contracts.md)."""
    metrics = dict(outcome.metrics)
    metrics.setdefault("time", time.perf_counter() - started)
    epoch = metrics.pop("epoch", outcome.step)
    report = {"kind": "result", "trial": number, "worker": copy, "status": outcome.status,
              "error": outcome.error, "epoch": int(epoch) if isinstance(epoch, (int, float)) else 0,
              "value": outcome.value}
    report.update({key: _float_if_numeric(metrics.pop(key, None)) for key in RESULT_KEYS})
    report["metrics"] = metrics
    return report


def _float_if_numeric(value: Any) -> Any:
    """``value`` as a float when it converts to one (a NumPy scalar), else as it is."""
    try:
        return float(value) if value is not None and not isinstance(value, str) else value
    except (TypeError, ValueError):
        return value
