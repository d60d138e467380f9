"""``pruner: median``: the median stopping rule.

Stop a trial whose score at epoch ``k`` is below the median of the scores that
*finished* (``ok``) trials had at ``k``, once at least ``min_trials`` of them reached
``k`` and after ``warmup_epochs`` epochs.
"""

from __future__ import annotations

from typing import Any, Mapping

from diel.checks import whole_number
from diel.search.protocol import DecisionPoints
from diel.search.schedulers.base import Pruner, check_option_names

__all__ = ["MedianPruner"]


class MedianPruner(Pruner):
    """The median stopping rule (see the module docstring)."""

    def __init__(self, min_trials: int = 3, warmup_epochs: int = 1) -> None:
        self.min_trials = min_trials
        self.warmup_epochs = warmup_epochs
        self._curves: dict[int, dict[int, float]] = {}
        self._finished: list[dict[int, float]] = []

    @classmethod
    def from_options(cls, name: str, options: Mapping[str, Any], path: str) -> "MedianPruner":
        """``min_trials`` (an integer >= 1, default 3) and ``warmup_epochs`` (>= 0,
        default 1)."""
        check_option_names(options, ("min_trials", "warmup_epochs"), path)
        return cls(whole_number(options.get("min_trials", 3), f"{path}.min_trials", 1),
                   whole_number(options.get("warmup_epochs", 1), f"{path}.warmup_epochs", 0))

    def decision_points(self, trial: int) -> DecisionPoints:
        """Every epoch after the warm-up."""
        return DecisionPoints(self.warmup_epochs + 1)

    def should_prune(self, trial: int, epoch: int, score: float) -> bool:
        self._curves.setdefault(trial, {})[epoch] = score
        if epoch <= self.warmup_epochs:
            return False
        import statistics   # here: a search without this pruner does not import it (fractions)

        peers = [curve[epoch] for curve in self._finished if epoch in curve]
        return len(peers) >= self.min_trials and score < statistics.median(peers)

    def finish(self, trial: int, ok: bool) -> None:
        curve = self._curves.pop(trial, {})
        if ok and curve:
            self._finished.append(curve)
