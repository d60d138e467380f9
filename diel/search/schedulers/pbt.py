"""Population-based training's scheduler (Jaderberg et al. 2017), installed by
``strategy: pbt`` (:mod:`diel.search.samplers.pbt`), not named under ``pruner:``.

Asynchronous, as Ray Tune's ``PopulationBasedTraining``: a member reaching an
``interval`` epoch (``interval``, ``2 * interval``, ...; the only reports that wait for
the master's answer) below ``max_epochs`` (the members' last epoch, when the settings
name it: a member there has finished and is neither ranked nor exploited, as Ray Tune
stops a trial at its stop criterion before its scheduler sees the result) is ranked by
its score there against each other member still training by its latest interval score,
whatever that member's epoch (Ray Tune's ``last_score``; docs/search.md says why not at
the member's own epoch, as diel ranked before), but for a member that has exploited and
not yet reported an interval epoch since: its last score is of a state it no longer has
(Ray Tune keeps it; in diel it held the bottom quantile while the member restarted, and
the others seldom exploited). In the bottom ``quantile`` it
*exploits*: it goes on from the checkpoint a donor drawn among the top ``quantile`` made
at its latest interval epoch, the one whose score ranked it (:meth:`Decision.exploit`
names that step, as Ray Tune clones the state a top trial saved at its decision), with
the donor's parameters *explored*
(:meth:`PBTScheduler.explore`): each mutable parameter is resampled from the space with
probability ``resample_probability``, else perturbed: a float or an integer multiplied
by a factor drawn from ``perturb`` (an integer rounded), clipped to its bounds; a point
of a ``range``, ``logrange`` or ``values`` list moves to a neighbour (one up or one down
the list); a ``choice`` is resampled. The bottom and the top are each
``ceil(n * quantile)`` members of the ``n`` ranked, at most ``n // 2``; with fewer than
two members ranked nobody exploits.

Synchronous (``synchronous``, as Ray Tune's ``synchronous=True``): a member's report
at an interval epoch below ``max_epochs`` is held (:meth:`PBTScheduler.holds`) until
every live member (proposed or restored, not finished) has reported that epoch or a
later one; then the whole *generation* is decided at once on its scores at that epoch:
its bottom ``quantile`` exploits its top, with the same draws as above, and the answers
go out together (:meth:`PBTScheduler.answers`). A member that ends leaves the
generations it has not been decided in (not waited for, not ranked: it is no donor).

Replays and determinism (the scheduler contract, :mod:`diel.search.schedulers.base`):
every draw comes from ``numpy.random.default_rng([seed, trial, epoch])``, so an answer
depends only on the reports seen; a finished member leaves the ranking (it is no donor:
its checkpoints go). The members' current parameters are the one thing the scheduler
learns other than from reports: the pbt sampler tells it each member's parameters as it
proposes or restores them (:meth:`PBTScheduler.member`), and each exploit sets them.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from diel.search.protocol import DecisionPoints
from diel.search.schedulers.base import Action, Decision, Scheduler
from diel.search.space import Param, SearchSpace, param_key

__all__ = ["PBTScheduler"]


class PBTScheduler(Scheduler):
    """Asynchronous population-based training over ``space`` (see the module docstring);
    ``mutable``: the parameters an explore may change (None: all); ``max_epochs``: the
    members' last epoch (None: not known), where nobody decides."""

    actions = frozenset({Action.CONTINUE, Action.EXPLOIT})

    def __init__(self, space: SearchSpace, seed: int, interval: int, quantile: float = 0.25,
                 resample_probability: float = 0.25,
                 perturb: Sequence[float] = (0.8, 1.2),
                 mutable: Sequence[str] | None = None,
                 max_epochs: int | None = None, synchronous: bool = False) -> None:
        self.space, self.seed, self.interval = space, seed, interval
        self.synchronous = synchronous
        self.max_epochs = max_epochs
        self.quantile, self.resample_probability = quantile, resample_probability
        self.perturb = tuple(perturb)
        self.mutable = frozenset(space.names if mutable is None else mutable)
        #: member still training -> its score at its latest decision (interval epoch)
        self._scores: dict[int, float] = {}
        self._params: dict[int, dict[str, Any]] = {}   # member -> its current parameters
        self._decided: dict[int, int] = {}   # member -> epoch of its latest decision
        #: members that exploited and have not reported an interval epoch since: unranked
        self._exploiting: set[int] = set()
        self._ended: set[int] = set()   # members finished
        self._latest: dict[int, int] = {}   # member -> its latest epoch reported
        #: synchronous: interval epoch -> {member: its score there}, generations pending
        self._generations: dict[int, dict[int, float]] = {}
        self._answers: list[tuple[int, int, Decision]] = []   # decided, not yet taken

    def member(self, trial: int, params: Mapping[str, Any]) -> None:
        """Trial ``trial`` is a member with ``params`` now (proposed, or restored)."""
        self._params[trial] = dict(params)

    def decision_points(self, trial: int) -> DecisionPoints:
        """The multiples of the interval, below ``max_epochs`` when it is known."""
        return DecisionPoints(self.interval, below=self.max_epochs, every=self.interval)

    def checkpoint_every(self) -> int | None:
        """Members checkpoint at every interval epoch: a donor's state is its latest."""
        return self.interval

    def holds(self, trial: int, epoch: int) -> bool:
        """Synchronous: every interval epoch below ``max_epochs`` waits for its
        generation."""
        return self.synchronous and self._deciding(epoch)

    def answers(self) -> list[tuple[int, int, Decision]]:
        """The answers of the generations decided since the last call (synchronous)."""
        answers, self._answers = self._answers, []
        return answers

    def _deciding(self, epoch: int) -> bool:
        """True at an interval epoch before the last, where members are ranked."""
        return not epoch % self.interval and \
            (self.max_epochs is None or epoch < self.max_epochs)

    def decide(self, trial: int, epoch: int, score: float) -> Decision:
        """Continue, or, at an interval epoch before the last in the bottom quantile of
        the members' latest interval scores (those exploiting left out), exploit a donor
        from the top quantile, from the step that ranked it (its latest interval epoch),
        with its parameters explored. Synchronous: the report is held (the answer here is not
        used) and its generation decided once complete (:meth:`answers`)."""
        if self.synchronous:
            self._latest[trial] = max(epoch, self._latest.get(trial, epoch))
        if not self._deciding(epoch):
            self._settle()   # a member past a pending generation's epoch is not waited for
            return Decision.continue_()
        self._scores[trial], self._decided[trial] = score, epoch
        if self.synchronous:
            self._generations.setdefault(epoch, {})[trial] = score
            self._settle()
            return Decision.continue_()
        self._exploiting.discard(trial)
        ranked = {t: v for t, v in self._scores.items() if t not in self._exploiting}
        decision = self._ranked(trial, epoch, ranked)
        if decision.action is Action.EXPLOIT:
            self._exploiting.add(trial)
        return decision

    def _ranked(self, trial: int, epoch: int, scores: Mapping[int, float]) -> Decision:
        """``trial``'s answer at ``epoch`` among the members ``scores`` ranks: exploit a
        top member when it is in the bottom quantile, else continue."""
        ranked = sorted(scores, key=lambda t: (scores[t], -t))   # worst first
        count = min(math.ceil(len(ranked) * self.quantile), len(ranked) // 2)
        if count == 0 or trial not in ranked[:count]:
            return Decision.continue_()
        rng = self._rng(trial, epoch)
        top = sorted(ranked[-count:])
        donor = top[int(rng.integers(len(top)))]
        params = self.explore(self._params.get(donor, {}), rng)
        self._params[trial] = params
        step = epoch if self.synchronous else self._decided[donor]
        return Decision.exploit(donor, params, step)

    def _settle(self) -> None:
        """Decide each pending generation (oldest first) that is complete: every live
        member reported its epoch, or a later one (it went past it: resumed beyond, or
        answered otherwise)."""
        for epoch in sorted(self._generations):
            scores = self._generations[epoch]
            live = [t for t in self._params if t not in self._ended]
            if any(t not in scores and self._latest.get(t, 0) <= epoch for t in live):
                return
            del self._generations[epoch]
            for trial in sorted(scores):
                self._answers.append((trial, epoch, self._ranked(trial, epoch, scores)))

    def resample(self, trial: int) -> dict[str, Any]:
        """New parameters for ``trial``, explored from its own (its donor's checkpoint is
        gone, so it goes on from its own state), as its latest decision drew them."""
        rng = self._rng(trial, self._decided.get(trial, 0), 1)
        params = self.explore(self._params.get(trial, {}), rng, resample=1.0)
        self._params[trial] = params
        return params

    def donor_gone(self, trial: int) -> dict[str, Any]:
        """The contract's hook: resample (:meth:`resample`)."""
        return self.resample(trial)

    def explore(self, params: Mapping[str, Any], rng: np.random.Generator,
                resample: float | None = None) -> dict[str, Any]:
        """``params`` with each mutable parameter resampled (probability ``resample``,
        by default ``resample_probability``) or perturbed within the space."""
        chance = self.resample_probability if resample is None else resample
        explored: dict[str, Any] = {}
        for param in self.space.params:
            if not param.active(explored):
                continue
            value = params.get(param.name)
            if param.name in self.mutable or value is None:
                resampled = value is None or rng.random() < chance
                value = param.sample(rng) if resampled else self._perturbed(param, value, rng)
            explored[param.name] = value
        return explored

    def _perturbed(self, param: Param, value: Any, rng: np.random.Generator) -> Any:
        """``value`` of ``param`` moved a little: scaled by a factor of ``perturb``
        (numbers) or to a neighbouring point (lists); a ``choice`` is resampled."""
        if param.points is not None:
            if param.kind == "choice":
                return param.sample(rng)
            keys = [param_key({"v": point}) for point in param.points]
            key = param_key({"v": value})
            if key not in keys:
                return param.sample(rng)
            index = keys.index(key) + (1 if rng.random() < 0.5 else -1)
            return param.points[min(max(index, 0), len(param.points) - 1)]
        factor = self.perturb[int(rng.integers(len(self.perturb)))]
        moved = min(max(value * factor, param.low), param.high)  # type: ignore[type-var]
        if param.kind != "int":
            return float(moved)
        step = round(moved)
        if step == value:   # a small integer would never move: one step the factor's way
            step += 1 if factor > 1 else -1 if factor < 1 else 0
        return int(min(max(step, param.low), param.high))  # type: ignore[type-var]

    def finish(self, trial: int, ok: bool) -> None:
        """A member that ended is ranked no more (its checkpoints go: it is no donor)."""
        self._scores.pop(trial, None)
        self._decided.pop(trial, None)
        self._exploiting.discard(trial)
        self._ended.add(trial)
        for scores in self._generations.values():   # it leaves those still pending
            scores.pop(trial, None)
        for epoch in [e for e, scores in self._generations.items() if not scores]:
            del self._generations[epoch]
        self._settle()

    def _rng(self, trial: int, epoch: int, *more: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, trial, epoch, *more])
