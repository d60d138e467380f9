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
* :class:`HyperbandPruner` — asynchronous Hyperband (Li et al. 2018, made asynchronous
  as Optuna's ``HyperbandPruner`` and Ray Tune's ``AsyncHyperBand`` do): ``s_max + 1``
  brackets, ``s_max = floor(log_eta(max_epochs / min_epochs))``, each an asynchronous
  successive halving whose first rung is ``min_epochs * eta**b`` for bracket ``b``. A
  trial belongs to one bracket and is compared only with the trials of that bracket.

Rungs stop below ``max_epochs`` when it is given: a trial at its full length is done,
and stopping it there would only relabel a finished trial ``pruned``.
"""

from __future__ import annotations

import statistics
from typing import Any, Mapping, Protocol

from diel.errors import ConfigError
from diel.worker.settings import unknown_key_message

__all__ = ["Pruner", "MedianPruner", "HalvingPruner", "HyperbandPruner", "parse_pruner"]


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

    def __init__(self, min_epochs: int = 1, eta: int = 3, max_epochs: int | None = None) -> None:
        self.min_epochs = min_epochs
        self.eta = eta
        self.max_epochs = max_epochs
        self._rungs: dict[int, list[float]] = {}

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


class HyperbandPruner:
    """Asynchronous Hyperband (see the module docstring).

    Bracket ``b`` (``0 .. s_max``) is a :class:`HalvingPruner` with first rung
    ``min_epochs * eta**b``; with ``s = s_max - b`` it gets ``ceil((s_max + 1) * eta**s /
    (s + 1))`` of every ``total`` trials: Li et al.'s ``n`` for that bracket, the share
    Optuna allocates too, so the most aggressive bracket gets the most trials and the
    last one (no stop before ``max_epochs`` when ``max_epochs = min_epochs * eta**s_max``)
    the fewest. Trial ``n``'s bracket is a function of ``n`` alone (a smooth weighted
    round-robin over one cycle of ``total`` trials, position ``n % total``): fixed the
    moment the trial has its number, the same when a resumed study replays it, and
    spread evenly, so that even a short study has trials in every bracket. (Optuna hashes
    the study name with the trial number instead: the right shares on average only.)
    """

    def __init__(self, *, min_epochs: int = 1, max_epochs: int, eta: int = 3) -> None:
        if not 1 <= min_epochs < max_epochs or eta < 2:
            raise ValueError(f"expected 1 <= min_epochs < max_epochs and eta >= 2; got "
                             f"min_epochs={min_epochs}, max_epochs={max_epochs}, eta={eta}")
        self.min_epochs = min_epochs
        self.max_epochs = max_epochs
        self.eta = eta
        s_max = 0   # floor(log_eta(max / min)) in integers: no rounding at exact powers
        while min_epochs * eta ** (s_max + 1) <= max_epochs:
            s_max += 1
        self.brackets = [HalvingPruner(min_epochs * eta ** b, eta, max_epochs)
                         for b in range(s_max + 1)]
        self.shares = [-(-(s_max + 1) * eta ** s // (s + 1)) for s in range(s_max, -1, -1)]
        self._cycle = _interleave(self.shares)

    def bracket(self, trial: int) -> int:
        """The bracket of trial number ``trial`` (0 stops earliest)."""
        return self._cycle[trial % len(self._cycle)]

    def should_prune(self, trial: int, epoch: int, score: float) -> bool:
        return self.brackets[self.bracket(trial)].should_prune(trial, epoch, score)

    def finish(self, trial: int, ok: bool) -> None:
        self.brackets[self.bracket(trial)].finish(trial, ok)


def _interleave(shares: list[int]) -> list[int]:
    """One cycle of a smooth weighted round-robin: index ``b`` appears ``shares[b]`` times,
    each as evenly spread over the cycle as the others allow (ties go to the lower index)."""
    total = sum(shares)
    credit = [0] * len(shares)
    cycle = []
    for _ in range(total):
        credit = [c + w for c, w in zip(credit, shares)]
        chosen = max(range(len(shares)), key=lambda b: (credit[b], -b))
        credit[chosen] -= total
        cycle.append(chosen)
    return cycle


_OPTIONS: dict[str, dict[str, int | None]] = {   # defaults; None: required
    "median": {"min_trials": 3, "warmup_epochs": 1},
    "halving": {"min_epochs": 1, "eta": 3},
    "hyperband": {"min_epochs": 1, "max_epochs": None, "eta": 3}}
_MINIMUM = {"min_trials": 1, "warmup_epochs": 0, "min_epochs": 1, "max_epochs": 2, "eta": 2}
_SHARED = ("metric", "direction")  # read by the master, not the pruner
_CLASSES = {"median": MedianPruner, "halving": HalvingPruner, "hyperband": HyperbandPruner}


def parse_pruner(spec: Any, path: str) -> tuple[Pruner | None, Mapping[str, Any]]:
    """Read ``pruner:`` — ``none``, ``median``, ``halving``, or ``{median: {...}}`` /
    ``{halving: {...}}`` / ``{hyperband: {...}}`` with the options above (hyperband needs
    ``max_epochs``, greater than ``min_epochs``) plus ``metric`` (an expression over the
    epoch metrics; default the objective) and ``direction`` (default the objective's).

    Returns the pruner (``None`` for none) and the options mapping (for metric/direction).
    """
    if spec is None or spec == "none":
        return None, {}
    if isinstance(spec, str):
        spec = {spec: {}}
    if not (isinstance(spec, Mapping) and len(spec) == 1):
        raise ConfigError(path, "expected none, median, halving, hyperband, or a mapping such "
                                "as {median: {min_trials: 3, warmup_epochs: 1}}")
    (kind, options), = spec.items()
    if kind not in _OPTIONS:
        raise ConfigError(path, unknown_key_message(kind, [*_OPTIONS, "none"], "pruner"))
    options = {} if options is None else options
    if not isinstance(options, Mapping):
        raise ConfigError(f"{path}.{kind}", f"expected a mapping of options; got {options!r}")
    values = dict(_OPTIONS[kind])
    for key, value in options.items():
        where = f"{path}.{kind}.{key}"
        if key in _SHARED:
            continue
        if key not in values:
            raise ConfigError(where, unknown_key_message(key, [*_OPTIONS[kind], *_SHARED],
                                                         "option"))
        if not isinstance(value, int) or isinstance(value, bool) or value < _MINIMUM[key]:
            raise ConfigError(where, f"expected an integer >= {_MINIMUM[key]}; got {value!r}")
        values[key] = value
    if kind == "hyperband":
        _check_hyperband(values["min_epochs"], values["max_epochs"], f"{path}.{kind}")
    pruner: Pruner = _CLASSES[kind](**values)
    return pruner, options


def _check_hyperband(min_epochs: int | None, max_epochs: int | None, path: str) -> None:
    """``max_epochs`` is required (the brackets are cut from a trial's full length) and
    must exceed ``min_epochs``."""
    if max_epochs is None:
        raise ConfigError(f"{path}.max_epochs", "required: the epochs a trial trains when it "
                                                "is never stopped, e.g. {hyperband: "
                                                "{min_epochs: 1, max_epochs: 27, eta: 3}}")
    if min_epochs is not None and max_epochs <= min_epochs:
        raise ConfigError(f"{path}.max_epochs", f"expected an integer > min_epochs "
                                                f"({min_epochs}); got {max_epochs!r}")
