"""``pruner: halving``: asynchronous successive halving (ASHA).

Rungs at epochs ``min_epochs * eta**i``; a trial reaching a rung continues only if its
score is among the top ``1/eta`` of every score recorded at that rung so far (at least
the best one always continues, so the first trials are not stopped for lack of
company). Rungs stop below ``max_epochs`` when it is given: a trial at its full length
is done, and stopping it there would only relabel a finished trial ``pruned``.

``mode``: ``stop`` (the default) stops a trial that is not among the top; ``promotion``
pauses it instead (it checkpoints and frees its worker) and promotes it, as ASHA's
promotion does (Li et al. 2020; Syne Tune's ``type="promotion"``), as soon as it is
among the top ``max(1, n // eta)`` of the ``n`` scores at its rung, as later trials reach
the rung: :meth:`HalvingPruner.promote` names it and the engine resumes it from its
checkpoint, so no epoch is trained twice.
"""

from __future__ import annotations

from typing import Any, Mapping

from diel.checks import one_of, whole_number
from diel.search.protocol import DecisionPoints
from diel.search.schedulers.base import Action, Decision, Pruner, check_option_names

__all__ = ["HalvingPruner", "MODES"]

#: The values of the ``mode`` option of ``halving`` and ``hyperband``.
MODES = ("stop", "promotion")


class HalvingPruner(Pruner):
    """Asynchronous successive halving (see the module docstring)."""

    def __init__(self, min_epochs: int = 1, eta: int = 3, max_epochs: int | None = None,
                 mode: str = "stop") -> None:
        if mode not in MODES:
            raise ValueError(f"mode is one of {', '.join(MODES)}, not {mode!r}")
        self.min_epochs = min_epochs
        self.eta = eta
        self.max_epochs = max_epochs
        self.mode = mode
        if mode == "promotion":
            self.actions = frozenset({Action.CONTINUE, Action.PAUSE})
        self._rungs: dict[int, dict[int, float]] = {}   # rung -> trial -> its score there
        self._waiting: dict[int, int] = {}   # trial paused, not promoted -> its rung

    @classmethod
    def from_options(cls, name: str, options: Mapping[str, Any], path: str) -> "HalvingPruner":
        """``min_epochs`` (an integer >= 1, default 1), ``eta`` (>= 2, default 3) and
        ``mode`` (``stop``, the default, or ``promotion``)."""
        check_option_names(options, ("min_epochs", "eta", "mode"), path)
        return cls(whole_number(options.get("min_epochs", 1), f"{path}.min_epochs", 1),
                   whole_number(options.get("eta", 3), f"{path}.eta", 2),
                   mode=one_of(options.get("mode", "stop"), f"{path}.mode", MODES))

    def is_rung(self, epoch: int) -> bool:
        """True when ``epoch`` is ``min_epochs * eta**i`` for some ``i >= 0`` (and below
        ``max_epochs`` when that is given)."""
        return self.rungs.includes(epoch)

    @property
    def rungs(self) -> DecisionPoints:
        """The rungs, the only epochs at which this pruner stops or pauses a trial."""
        return DecisionPoints(self.min_epochs, self.eta, self.max_epochs)

    def decision_points(self, trial: int) -> DecisionPoints:
        """The rungs: a report there waits for its answer."""
        return self.rungs

    def should_prune(self, trial: int, epoch: int, score: float) -> bool:
        """Record ``score`` when ``epoch`` is a rung; True when the trial is not among
        the top there. A trial reaching a rung past the one it was paused at was
        promoted: it waits no more."""
        if not self.is_rung(epoch):
            return False
        self._waiting.pop(trial, None)
        self._rungs.setdefault(epoch, {})[trial] = score
        return not self._among_top(epoch, score)

    def _among_top(self, rung: int, score: float) -> bool:
        """``score`` is among the top ``max(1, n // eta)`` of the ``n`` scores at ``rung``."""
        scores = self._rungs[rung].values()
        keep = max(1, len(scores) // self.eta)
        return sum(1 for s in scores if s > score) < keep

    def decide(self, trial: int, epoch: int, score: float) -> Decision:
        """Continue, or (not among the top at a rung) stop or, in promotion mode, pause."""
        if not self.should_prune(trial, epoch, score):
            return Decision.continue_()
        if self.mode == "stop":
            return Decision.stop()
        self._waiting[trial] = epoch
        return Decision.pause()

    def promotable(self) -> tuple[int, float, int] | None:
        """``(rung, score, trial)`` of the paused trial to promote first, among those now
        among the top at their rung: the highest rung, then the best score, then the
        lowest trial number; None when none is."""
        ready = [(rung, self._rungs[rung][trial], trial)
                 for trial, rung in self._waiting.items()
                 if self._among_top(rung, self._rungs[rung][trial])]
        return max(ready, key=lambda r: (r[0], r[1], -r[2]), default=None)

    def promote(self) -> int | None:
        """The paused trial to resume now (:meth:`promotable`), no longer waiting."""
        ready = self.promotable()
        if ready is None:
            return None
        del self._waiting[ready[2]]
        return ready[2]

    def waiting(self) -> frozenset[int]:
        """The trials paused at a rung and not promoted."""
        return frozenset(self._waiting)

    def finish(self, trial: int, ok: bool) -> None:
        """Rung scores stay: later trials compete with every trial that reached the rung.
        A trial that ended waits no more."""
        self._waiting.pop(trial, None)
