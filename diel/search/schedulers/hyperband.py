"""``pruner: hyperband``: asynchronous Hyperband.

Li et al. 2018, made asynchronous as Optuna's ``HyperbandPruner`` and Ray Tune's
``AsyncHyperBand`` do: ``s_max + 1`` brackets, ``s_max = floor(log_eta(max_epochs /
min_epochs))``, each an asynchronous successive halving (:class:`HalvingPruner`) whose
first rung is ``min_epochs * eta**b`` for bracket ``b``. A trial belongs to one bracket
and is compared only with the trials of that bracket. No rung is at or past
``max_epochs``, a trial's full length.

``mode``: ``stop`` (the default) or ``promotion``, as for ``halving``
(:mod:`diel.search.schedulers.halving`): each bracket pauses the trials it would stop
and promotes them as their rung fills; :meth:`HyperbandPruner.promote` takes the highest
rung of any bracket first.
"""

from __future__ import annotations

from typing import Any, Mapping

from diel.checks import one_of, whole_number
from diel.errors import ConfigError
from diel.search.protocol import DecisionPoints
from diel.search.schedulers.base import Action, Decision, Pruner, check_option_names
from diel.search.schedulers.halving import MODES, HalvingPruner

__all__ = ["HyperbandPruner"]


class HyperbandPruner(Pruner):
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

    def __init__(self, *, min_epochs: int = 1, max_epochs: int, eta: int = 3,
                 mode: str = "stop") -> None:
        if not 1 <= min_epochs < max_epochs or eta < 2:
            raise ValueError(f"expected 1 <= min_epochs < max_epochs and eta >= 2; got "
                             f"min_epochs={min_epochs}, max_epochs={max_epochs}, eta={eta}")
        self.min_epochs = min_epochs
        self.max_epochs = max_epochs
        self.eta = eta
        self.mode = mode
        if mode == "promotion":
            self.actions = frozenset({Action.CONTINUE, Action.PAUSE})
        s_max = 0   # floor(log_eta(max / min)) in integers: no rounding at exact powers
        while min_epochs * eta ** (s_max + 1) <= max_epochs:
            s_max += 1
        self.brackets = [HalvingPruner(min_epochs * eta ** b, eta, max_epochs, mode)
                         for b in range(s_max + 1)]
        self.shares = [-(-(s_max + 1) * eta ** s // (s + 1)) for s in range(s_max, -1, -1)]
        self._cycle = _interleave(self.shares)

    @classmethod
    def from_options(cls, name: str, options: Mapping[str, Any], path: str) -> "HyperbandPruner":
        """``max_epochs`` (required: an integer greater than ``min_epochs``),
        ``min_epochs`` (>= 1, default 1), ``eta`` (>= 2, default 3) and ``mode``
        (``stop``, the default, or ``promotion``)."""
        check_option_names(options, ("min_epochs", "max_epochs", "eta", "mode"), path)
        min_epochs = whole_number(options.get("min_epochs", 1), f"{path}.min_epochs", 1)
        if "max_epochs" not in options:
            raise ConfigError(f"{path}.max_epochs", "required: the epochs a trial trains when "
                                                    "it is never stopped, e.g. {hyperband: "
                                                    "{min_epochs: 1, max_epochs: 27, eta: 3}}")
        max_epochs = whole_number(options["max_epochs"], f"{path}.max_epochs", 2)
        eta = whole_number(options.get("eta", 3), f"{path}.eta", 2)
        if max_epochs <= min_epochs:
            raise ConfigError(f"{path}.max_epochs", f"expected an integer > min_epochs "
                                                    f"({min_epochs}); got {max_epochs!r}")
        mode = one_of(options.get("mode", "stop"), f"{path}.mode", MODES)
        return cls(min_epochs=min_epochs, max_epochs=max_epochs, eta=eta, mode=mode)

    def bracket(self, trial: int) -> int:
        """The bracket of trial number ``trial`` (0 stops earliest)."""
        return self._cycle[trial % len(self._cycle)]

    def decision_points(self, trial: int) -> DecisionPoints:
        """The rungs of the trial's bracket."""
        return self.brackets[self.bracket(trial)].rungs

    def should_prune(self, trial: int, epoch: int, score: float) -> bool:
        return self.brackets[self.bracket(trial)].should_prune(trial, epoch, score)

    def decide(self, trial: int, epoch: int, score: float) -> Decision:
        return self.brackets[self.bracket(trial)].decide(trial, epoch, score)

    def promote(self) -> int | None:
        """The paused trial to resume now: of each bracket's first
        (:meth:`HalvingPruner.promotable`), the one at the highest rung, then with the
        best score, then the lowest number."""
        ready = [(found, bracket) for bracket in self.brackets
                 if (found := bracket.promotable()) is not None]
        if not ready:
            return None
        _, bracket = max(ready, key=lambda r: (r[0][0], r[0][1], -r[0][2]))
        return bracket.promote()

    def waiting(self) -> frozenset[int]:
        """The trials paused at a rung and not promoted, in every bracket."""
        return frozenset().union(*(bracket.waiting() for bracket in self.brackets))

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
