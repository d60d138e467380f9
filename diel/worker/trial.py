"""The ``trial`` object a user's objective function receives, and how a trial ends early.

``objective(trial)`` reads ``trial.params``, trains, calls ``trial.report(step, **metrics)``
after each epoch (True means the master pruned the trial: return now) and returns a
mapping of metrics or one number. Everything else (tasks, tags, isolation, timeouts) is
the worker's business, so the same function runs in an isolated child, in the MPI rank
itself or in a test with a hand-made ``Trial``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from diel.errors import DielError
from diel.limits import METRIC_NAME_CHARS, METRIC_TEXT_CHARS, METRICS_PER_REPORT, clip

__all__ = ["Trial", "TrialPruned", "TrialTimedOut", "Reporter", "clean_metrics",
           "metrics_of_return"]

#: ``reporter(step, metrics) -> pruned?``: what the worker does with one report.
Reporter = Callable[[int, dict[str, Any]], bool]


class TrialPruned(DielError):
    """Raise from an objective function to stop a pruned trial (returning works too)."""


class TrialTimedOut(DielError):
    """Raised by ``trial.report`` once the trial has run past its timeout."""


@dataclass
class Trial:
    """One trial as the user's function sees it.

    ``params``: the sampled parameters, over the worker's fixed ``params`` setting;
    ``number``: the trial number in the study; ``study``: the study name; ``copy`` and
    ``rank``: which worker copy and which rank of it runs this call; ``comm``: the copy's
    communicator when a trial spans several ranks (``size > 1``), else None;
    ``device``: the GPU index this rank should use (CUDA numbering as this process sees
    it), or None without a GPU.
    """

    params: dict[str, Any]
    number: int
    study: str
    copy: int = 0
    rank: int = 0
    comm: Any = None
    device: int | None = None
    _reporter: Reporter | None = field(default=None, repr=False)
    _pruned: bool = field(default=False, repr=False)
    last_step: int = 0
    last_metrics: dict[str, Any] = field(default_factory=dict)

    def report(self, step: int, **metrics: Any) -> bool:
        """Report the metrics of ``step`` (an epoch); True when the trial was pruned.

        The master sees every report (early stopping, curves in the database). Raises
        :class:`TrialTimedOut` once the trial is past its timeout, so a function that
        reports regularly stops cleanly; on every rank of the copy at the same step.
        """
        if isinstance(step, bool) or not isinstance(step, int):
            raise TypeError(f"trial.report: step must be an int (an epoch number), got {step!r}")
        values = clean_metrics(metrics)
        self.last_step, self.last_metrics = step, values
        if self._reporter is not None and not self._pruned:
            self._pruned = bool(self._reporter(step, values))
        return self._pruned

    @property
    def should_prune(self) -> bool:
        """True once a report was answered with a prune order."""
        return self._pruned


def clean_metrics(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """Metrics as plain JSON values: NumPy and torch scalars become floats; names are
    clipped to :data:`~diel.limits.METRIC_NAME_CHARS` characters and string values to
    :data:`~diel.limits.METRIC_TEXT_CHARS` (:func:`~diel.limits.clip`).

    ValueError for more than :data:`~diel.limits.METRICS_PER_REPORT` metrics; anything
    that is not a number, string, bool or None raises TypeError naming it.
    """
    if len(metrics) > METRICS_PER_REPORT:
        raise ValueError(f"{len(metrics)} metrics in one report; at most {METRICS_PER_REPORT} "
                         "are taken (diel.limits.METRICS_PER_REPORT): report fewer")
    clean: dict[str, Any] = {}
    for key, value in metrics.items():
        name = clip(str(key), METRIC_NAME_CHARS)
        if isinstance(value, str):
            clean[name] = clip(value, METRIC_TEXT_CHARS)
        elif value is None or isinstance(value, (bool, int, float)):
            clean[name] = value
        else:
            try:
                clean[name] = float(value)   # numpy.float32, torch scalar tensors, ...
            except (TypeError, ValueError):
                raise TypeError(f"metric {name!r} must be a number or a string, got "
                                f"{type(value).__name__}") from None
    return clean


def metrics_of_return(value: Any) -> tuple[dict[str, Any], float | None]:
    """What an objective returned, as ``(metrics, objective value or None)``.

    A mapping is the trial's metrics; one number is the objective's value itself.
    """
    if isinstance(value, Mapping):
        return clean_metrics(value), None
    if value is None:
        return {}, None
    if isinstance(value, bool):
        raise TypeError("the objective returned a bool; return a number or a mapping of metrics")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"the objective returned {type(value).__name__}; return a number or a "
                        "mapping of metrics such as {'accuracy': 0.9, 'loss': 0.3}") from None
    return {}, number
