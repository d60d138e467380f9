"""The conformance suite of a search strategy: :class:`SamplerSuite`.

It checks a :class:`~diel.search.samplers.Sampler` class against the contract in
:mod:`diel.search.samplers.base`, by calling it as the search engine does:

* its ``check`` accepts the suite's options over a space of the kinds it declares;
* each proposal gives every parameter of the space, and only those, a value of the
  parameter's kind within its bounds (a grid kind's value is one of its points);
* ``size`` is kept: a strategy with a size proposes exactly that many trials and then
  None; one without never returns None;
* ``restore`` takes stored trials (finished ones of every status, and ones left
  running), after which it proposes valid values and is told the running ones;
* where it claims to be deterministic (:attr:`SamplerSuite.deterministic`), one seed
  gives the same proposals, and two samplers restored from the same trials propose
  alike: a sampler keeps nothing of its own between runs.

Subclass it in a test module and name the class; set the other attributes where the
defaults do not fit::

    class TestNeighbour(SamplerSuite):
        sampler_class = BestNeighbour
        space = {"x": {"uniform": [0.0, 1.0]}}
"""

from __future__ import annotations

import math
import zlib
from typing import Any, ClassVar, Mapping, Sequence

from diel.checks import is_whole
from diel.search.samplers.base import Observation, Sampler
from diel.search.space import Param, SearchSpace, param_key, parse_space

__all__ = ["SamplerSuite", "SPACE_OF_KIND"]

#: One parameter of each kind, named after it; the suite's space is the ones a strategy's
#: ``kinds`` allow.
SPACE_OF_KIND: dict[str, dict[str, Any]] = {
    "values": {"values": ["relu", 0.5, None, True]},
    "range": {"range": [0, 1], "step": 0.25},
    "logrange": {"logrange": [0.001, 0.1], "num": 3},
    "uniform": {"uniform": [-1.0, 1.0]},
    "loguniform": {"loguniform": [1e-4, 1.0]},
    "int": {"int": [1, 5]},
    "choice": {"choice": ["relu", "tanh", "sigmoid"]},
}
_STATUSES = ("ok", "pruned", "ok", "failed")   # the statuses results are told in, in turn


def _expect(condition: bool, message: str) -> None:
    """Fail the check (an AssertionError, whether or not Python runs with -O)."""
    if not condition:
        raise AssertionError(message)


class SamplerSuite:
    """The checks every sampler class must pass (see the module docstring)."""

    #: The class under test.
    sampler_class: ClassVar[type[Sampler]]
    #: Its name in messages, as ``strategy: NAME`` would give it.
    name: ClassVar[str] = "under_test"
    #: Its options, as ``strategy: {NAME: {...}}`` would give them.
    options: ClassVar[Mapping[str, Any]] = {}
    #: The space searched, as the workflow writes it; None: :data:`SPACE_OF_KIND` for
    #: each of the class's ``kinds``.
    space: ClassVar[Mapping[str, Any] | None] = None
    #: One direction per objective.
    directions: ClassVar[Sequence[str]] = ("maximize",)
    #: ``async`` or ``batch``, as the engine says.
    mode: ClassVar[str] = "async"
    #: Proposals each check asks for (a strategy with a smaller size: all of them).
    trials: ClassVar[int] = 12
    #: False for a strategy whose proposals one seed does not fix.
    deterministic: ClassVar[bool] = True
    #: The study's seed.
    seed: ClassVar[int] = 7

    # -- helpers --------------------------------------------------------------------

    def search_space(self) -> SearchSpace:
        """The parsed space the checks search."""
        kinds = self.sampler_class.kinds
        spec = self.space if self.space is not None else {
            kind: SPACE_OF_KIND[kind] for kind in kinds if kind in SPACE_OF_KIND}
        return parse_space(spec, "space", kinds, self.name)

    def make(self, seed: int | None = None) -> Sampler:
        """A new sampler, as the engine makes one for a run (its options checked first)."""
        space = self.search_space()
        self.sampler_class.check(self.name, space, self.directions, self.options,
                                 f"strategy.{self.name}")
        return self.sampler_class(space, self.directions, self.seed if seed is None else seed,
                                  self.options, self.mode)

    def values(self, params: Mapping[str, Any]) -> tuple[float, ...]:
        """A made-up result for ``params``, one number per objective: the same for the
        same parameters, different for others."""
        key = param_key(params)
        return tuple(zlib.crc32(f"{index}:{key}".encode()) / 2**32
                     for index in range(len(self.directions)))

    def check_proposal(self, params: Any, space: SearchSpace, number: int) -> None:
        """Fail unless ``params`` gives every parameter of ``space`` a value of its kind."""
        _expect(isinstance(params, Mapping), f"propose({number}) returned {params!r}, not a "
                                             "mapping of parameter names to values")
        _expect(set(params) == set(space.names),
                f"propose({number}) gave {sorted(params)}; the space has {space.names}")
        for param in space.params:
            _expect(_valid(param, params[param.name]),
                    f"propose({number}) gave {param.name} = {params[param.name]!r}, not a value "
                    f"of its {param.kind} spec")
        param_key(params)   # JSON without nan: what the database stores

    def session(self, sampler: Sampler, count: int, first: int = 0) -> list[dict[str, Any]]:
        """Propose ``count`` trials from number ``first`` as the engine does, telling
        each its result (statuses in turn) before the next proposal; the proposals up
        to the first None."""
        space = self.search_space()
        proposals = []
        for number in range(first, first + count):
            params = sampler.propose(number)
            if params is None:
                break
            self.check_proposal(params, space, number)
            proposals.append(dict(params))
            status = _STATUSES[number % len(_STATUSES)]
            sampler.tell(number, params, None if status == "failed" else self.values(params),
                         status)
        return proposals

    def stored(self) -> list[Observation]:
        """The trials of an earlier run, as a resumed study restores them: ``trials``
        proposals, the last two left running."""
        earlier = self.make()
        earlier.restore([])
        observations = []
        space = self.search_space()
        for number in range(self.trials):
            params = earlier.propose(number)
            if params is None:
                break
            self.check_proposal(params, space, number)
            status = "running" if number >= self.trials - 2 else \
                _STATUSES[number % len(_STATUSES)]
            values = self.values(params) if status in ("ok", "pruned") else None
            observations.append(Observation(number, dict(params), status, values))
            if status != "running":
                earlier.tell(number, params, values, status)
        return observations

    # -- the checks -----------------------------------------------------------------

    def test_check_accepts_the_suites_settings(self) -> None:
        kinds = self.sampler_class.kinds
        _expect(bool(kinds) and set(kinds) <= set(SPACE_OF_KIND),
                f"kinds {kinds!r} must name some of diel's space kinds {tuple(SPACE_OF_KIND)}")
        _expect(isinstance(self.make(), self.sampler_class), "the class did not construct")

    def test_proposals_are_values_of_the_space(self) -> None:
        sampler = self.make()
        sampler.restore([])
        _expect(bool(self.session(sampler, self.trials)), "propose(0) of a new study was None")

    def test_size_is_kept(self) -> None:
        space = self.search_space()
        size = self.sampler_class.size(space)
        sampler = self.make()
        sampler.restore([])
        if size is None:
            proposals = self.session(sampler, self.trials)
            _expect(len(proposals) == self.trials,
                    f"propose({len(proposals)}) was None, but size() is None (never runs out)")
            return
        _expect(is_whole(size) and size >= 0, f"size() must be None or a whole number; got {size!r}")
        proposals = self.session(sampler, size + 1)
        _expect(len(proposals) == size, f"size() is {size} but {len(proposals)} trials were "
                                        "proposed before None")
        distinct = {param_key(params) for params in proposals}
        _expect(len(distinct) == size, f"size() counts distinct trials; {size} proposals held "
                                       f"{len(distinct)} distinct ones")

    def test_restore_then_propose_and_tell(self) -> None:
        observations = self.stored()
        sampler = self.make()
        sampler.restore(observations)
        first = len(observations)
        proposals = self.session(sampler, 3, first=first)
        size = self.sampler_class.size(self.search_space())
        _expect(bool(proposals) or (size is not None and size <= first),
                f"propose({first}) after restore was None, but the strategy is not exhausted")
        for trial in observations:
            if trial.status == "running":   # finishes after the run resumed
                sampler.tell(trial.number, trial.params, self.values(trial.params), "ok")

    def test_one_seed_gives_the_same_proposals(self) -> None:
        if not self.deterministic:
            return
        first, second = self.make(), self.make()
        first.restore([])
        second.restore([])
        _expect(self.session(first, self.trials) == self.session(second, self.trials),
                f"two samplers with seed {self.seed} proposed differently")

    def test_a_sampler_is_rebuilt_from_the_stored_trials_alone(self) -> None:
        if not self.deterministic:
            return
        observations = self.stored()
        first, second = self.make(), self.make()
        first.restore(observations)
        second.restore(observations)
        number = len(observations)
        _expect(self.session(first, 2, number) == self.session(second, 2, number),
                "two samplers restored from the same trials proposed differently: a sampler "
                "must keep nothing between runs but what restore() gives it")


def _valid(param: Param, value: Any) -> bool:
    """True when ``value`` is one ``param`` can take."""
    if param.points is not None:
        return param_key({"v": value}) in {param_key({"v": point}) for point in param.points}
    if param.kind == "int":
        return is_whole(value) and param.low <= value <= param.high
    return isinstance(value, float) and math.isfinite(value) and param.low <= value <= param.high
