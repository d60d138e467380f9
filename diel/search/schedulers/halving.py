"""``pruner: halving``: asynchronous successive halving (ASHA).

Rungs at epochs ``min_epochs * eta**i``; a trial reaching a rung continues only if its
score is among the top ``1/eta`` of every score recorded at that rung so far (at least
the best one always continues, so the first trials are not stopped for lack of
company). Rungs stop below ``max_epochs`` when it is given: a trial at its full length
is done, and stopping it there would only relabel a finished trial ``pruned``.
"""

from __future__ import annotations

from typing import Any, Mapping

from diel.checks import whole_number
from diel.search.schedulers.base import Pruner, check_option_names

__all__ = ["HalvingPruner"]


class HalvingPruner(Pruner):
    """Asynchronous successive halving (see the module docstring)."""

    def __init__(self, min_epochs: int = 1, eta: int = 3, max_epochs: int | None = None) -> None:
        self.min_epochs = min_epochs
        self.eta = eta
        self.max_epochs = max_epochs
        self._rungs: dict[int, list[float]] = {}

    @classmethod
    def from_options(cls, name: str, options: Mapping[str, Any], path: str) -> "HalvingPruner":
        """``min_epochs`` (an integer >= 1, default 1) and ``eta`` (>= 2, default 3)."""
        check_option_names(options, ("min_epochs", "eta"), path)
        return cls(whole_number(options.get("min_epochs", 1), f"{path}.min_epochs", 1),
                   whole_number(options.get("eta", 3), f"{path}.eta", 2))

    def is_rung(self, epoch: int) -> bool:
        """True when ``epoch`` is ``min_epochs * eta**i`` for some ``i >= 0`` (and below
        ``max_epochs`` when that is given)."""
        if self.max_epochs is not None and epoch >= self.max_epochs:
            return False
        rung = self.min_epochs
        while rung < epoch:
            rung *= self.eta
        return rung == epoch

    def should_prune(self, trial: int, epoch: int, score: float) -> bool:
        if not self.is_rung(epoch):
            return False
        scores = self._rungs.setdefault(epoch, [])
        scores.append(score)
        keep = max(1, len(scores) // self.eta)
        better = sum(1 for s in scores if s > score)
        return better >= keep

    def finish(self, trial: int, ok: bool) -> None:
        """Rung scores stay: later trials compete with every trial that reached the rung."""
