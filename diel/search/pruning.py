"""Early stopping of unpromising trials from the per-epoch metrics workers report.

A pruner sees *scores* where larger is always better (the master turns the metric by
its direction first) and answers, for each epoch report, whether to stop the trial.
Epochs are numbered as the worker reports them (the trainer counts from 1).

* :class:`MedianPruner` — the median stopping rule: stop a trial whose score at epoch
  ``k`` is below the median of the scores that *finished* (``ok``) trials had at ``k``,
  once at least ``min_trials`` of them reached ``k`` and after ``warmup_epochs`` epochs.
* :class:`HalvingPruner` — asynchronous successive halving (ASHA): rungs at epochs
  ``min_epochs * eta**i``; a trial reaching a rung continues only if its score is among
  the top ``1/eta`` of every score recorded at that rung so far (at least the best one
  always continues, so the first trials are not stopped for lack of company).
"""

from __future__ import annotations

import statistics
from typing import Any, Mapping, Protocol

from diel.errors import ConfigError

__all__ = ["Pruner", "MedianPruner", "HalvingPruner", "parse_pruner"]


class Pruner(Protocol):
    """What the search master asks of a pruner."""

    def should_prune(self, trial: int, epoch: int, score: float) -> bool:
        """Record ``score`` of ``trial`` at ``epoch``; True to stop the trial now."""

    def finish(self, trial: int, ok: bool) -> None:
        """``trial`` ended; ``ok`` when it completed (not failed or pruned)."""


class MedianPruner:
    """The median stopping rule (see the module docstring)."""

    def __init__(self, min_trials: int = 3, warmup_epochs: int = 1) -> None:
        self.min_trials = min_trials
        self.warmup_epochs = warmup_epochs
        self._curves: dict[int, dict[int, float]] = {}
        self._finished: list[dict[int, float]] = []

    def should_prune(self, trial: int, epoch: int, score: float) -> bool:
        self._curves.setdefault(trial, {})[epoch] = score
        if epoch <= self.warmup_epochs:
            return False
        peers = [curve[epoch] for curve in self._finished if epoch in curve]
        return len(peers) >= self.min_trials and score < statistics.median(peers)

    def finish(self, trial: int, ok: bool) -> None:
        curve = self._curves.pop(trial, {})
        if ok and curve:
            self._finished.append(curve)


class HalvingPruner:
    """Asynchronous successive halving (see the module docstring)."""

    def __init__(self, min_epochs: int = 1, eta: int = 3) -> None:
        self.min_epochs = min_epochs
        self.eta = eta
        self._rungs: dict[int, list[float]] = {}

    def is_rung(self, epoch: int) -> bool:
        """True when ``epoch`` is ``min_epochs * eta**i`` for some ``i >= 0``."""
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


_OPTIONS = {"median": {"min_trials": 3, "warmup_epochs": 1},
            "halving": {"min_epochs": 1, "eta": 3}}
_MINIMUM = {"min_trials": 1, "warmup_epochs": 0, "min_epochs": 1, "eta": 2}
_SHARED = ("metric", "direction")  # read by the master, not the pruner


def parse_pruner(spec: Any, path: str) -> tuple[Pruner | None, Mapping[str, Any]]:
    """Read ``pruner:`` — ``none``, ``median``, ``halving``, or ``{median: {...}}`` /
    ``{halving: {...}}`` with the options above plus ``metric`` (an expression over the
    epoch metrics; default the objective) and ``direction`` (default the objective's).

    Returns the pruner (``None`` for none) and the options mapping (for metric/direction).
    """
    if spec is None or spec == "none":
        return None, {}
    if isinstance(spec, str):
        spec = {spec: {}}
    if not (isinstance(spec, Mapping) and len(spec) == 1):
        raise ConfigError(path, "expected none, median, halving, or a mapping such as "
                                "{median: {min_trials: 3, warmup_epochs: 1}}")
    (kind, options), = spec.items()
    if kind not in _OPTIONS:
        raise ConfigError(path, f"unknown pruner {kind!r}; expected median, halving or none")
    options = {} if options is None else options
    if not isinstance(options, Mapping):
        raise ConfigError(f"{path}.{kind}", f"expected a mapping of options; got {options!r}")
    values = dict(_OPTIONS[kind])
    for key, value in options.items():
        where = f"{path}.{kind}.{key}"
        if key in _SHARED:
            continue
        if key not in values:
            raise ConfigError(where, f"unknown option; allowed: "
                                     f"{', '.join([*_OPTIONS[kind], *_SHARED])}")
        if not isinstance(value, int) or isinstance(value, bool) or value < _MINIMUM[key]:
            raise ConfigError(where, f"expected an integer >= {_MINIMUM[key]}; got {value!r}")
        values[key] = value
    pruner: Pruner = MedianPruner(**values) if kind == "median" else HalvingPruner(**values)
    return pruner, options
