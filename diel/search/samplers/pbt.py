"""``strategy: pbt``: population-based training (Jaderberg et al. 2017), asynchronous or
synchronous.

The sampler proposes the population, ``population`` members drawn at random from the
space (member ``n`` as ``strategy: random`` draws trial ``n``), and runs them with its
scheduler (:class:`~diel.search.schedulers.pbt.PBTScheduler`), which has weak members
exploit strong ones and explore their parameters every ``interval`` epochs. The search
ends when every member has finished training. Options (``strategy: {pbt: {...}}``):

``population``
    members, trained at once when there are as many worker copies (default: the
    ``max_trials`` setting, else the number of worker copies); ``max_trials``, when set,
    must equal it.
``interval``
    epochs between a member's decisions (default 1).
``quantile``
    the bottom fraction that exploits and the top fraction donors come from (default
    0.25, at most 0.5).
``resample_probability``
    the chance that an explore resamples a parameter from the space instead of
    perturbing it (default 0.25).
``perturb``
    the factors a number is multiplied by (default ``[0.8, 1.2]``).
``mutable``
    the parameters an explore may change (default: all).
``max_epochs``
    the members' last epoch, when the function trains a fixed number (default: not
    known). A member reaching it has finished: it is neither ranked nor exploited there
    (as Ray Tune stops a trial at its stop criterion), so an interval epoch that is the
    last does not make a weak member train again from a donor's state.
``synchronous``
    ``true``: at each interval epoch every member waits until all members still
    training have reported it, and the generation is decided at once, as Ray Tune's
    ``synchronous=True`` (default ``false``: a member decides against the latest scores
    of the others). Every member must train at once: a population larger than the
    worker copies is refused.

PB2 (a GP-bandit explore step) is not offered.
"""

from __future__ import annotations

from typing import Any, ClassVar, Mapping, Sequence

from diel.checks import boolean, is_number, no_unknown_keys, unknown_key_message, whole_number
from diel.errors import ConfigError
from diel.search.samplers.base import Observation, Sampler
from diel.search.schedulers.pbt import PBTScheduler
from diel.search.space import SearchSpace

__all__ = ["PBTSampler", "OPTIONS"]

OPTIONS = ("population", "interval", "quantile", "resample_probability", "perturb",
           "mutable", "max_epochs", "synchronous")


class PBTSampler(Sampler):
    """The population's initial draws, and the scheduler that trains it (module
    docstring)."""

    schedules: ClassVar[bool] = True

    def __init__(self, space: SearchSpace, directions: Sequence[str], seed: int,
                 options: Mapping[str, Any], mode: str) -> None:
        super().__init__(space, directions, seed, options, mode)
        checked = _checked(options, space, "strategy.pbt")
        if checked["population"] is None:
            raise ValueError("strategy pbt needs its population (Sampler.completed with the "
                             "number of worker copies fills it in)")
        self.population: int = checked["population"]
        self._scheduler = PBTScheduler(space, seed, checked["interval"], checked["quantile"],
                                       checked["resample_probability"], checked["perturb"],
                                       checked["mutable"], checked["max_epochs"],
                                       checked["synchronous"])

    @classmethod
    def check(cls, name: str, space: SearchSpace, directions: Sequence[str],
              options: Mapping[str, Any], path: str) -> None:
        """The options (module docstring); one objective only."""
        if len(directions) > 1:
            raise ConfigError(path, f"strategy {name} ranks its members by one objective; "
                                    f"this search has {len(directions)}")
        _checked(options, space, path)

    @classmethod
    def completed(cls, options: Mapping[str, Any], max_trials: int | None,
                  workers: int | None, path: str) -> dict[str, Any]:
        """``population`` filled in: from ``max_trials``, else ``workers``; a
        ``max_trials`` other than a given population is refused, and so is a synchronous
        population larger than the ``workers`` (its members wait for each other)."""
        population = options.get("population")
        if max_trials is not None and population is not None and population != max_trials:
            raise ConfigError(f"{path}.max_trials", (
                f"strategy pbt runs max_trials members, its population: {max_trials} here but "
                f"population is {population}; leave max_trials out or make the two equal"))
        if population is None:
            population = max_trials if max_trials is not None else workers
        if options.get("synchronous") is True and population is not None and \
                workers is not None and population > workers:
            raise ConfigError(f"{path}.strategy.pbt.synchronous", (
                f"synchronous pbt trains every member at once, but population is {population} "
                f"and this run has {workers} worker copies (members would wait for others that "
                f"cannot start); make population at most {workers}, run more worker ranks, or "
                f"set synchronous: false"))
        return {**options, "population": population} if population is not None else dict(options)

    def scheduler(self) -> PBTScheduler:
        return self._scheduler

    def restore(self, trials: Sequence[Observation]) -> None:
        """Each stored member with its current parameters (its latest segment's)."""
        for trial in trials:
            self._scheduler.member(trial.number, trial.params)

    def propose(self, number: int) -> dict[str, Any] | None:
        """Member ``number`` drawn at random, while the population is not complete."""
        if number >= self.population:
            return None
        params = self.space.sample(self.seed, number)
        self._scheduler.member(number, params)
        return params


def _checked(options: Mapping[str, Any], space: SearchSpace, path: str) -> dict[str, Any]:
    """The options with their defaults, or :class:`ConfigError` at the key of a wrong one."""
    no_unknown_keys(options, OPTIONS, path,
                    lambda key: unknown_key_message(key, OPTIONS, "option of strategy pbt"))
    population = options.get("population")
    if population is not None:
        population = whole_number(population, f"{path}.population", 2,
                                  expected="a whole number >= 2 (members)")
    quantile = _fraction(options.get("quantile", 0.25), f"{path}.quantile", 0.5)
    resample = _fraction(options.get("resample_probability", 0.25),
                         f"{path}.resample_probability", 1.0)
    perturb = options.get("perturb", [0.8, 1.2])
    if not (isinstance(perturb, list) and perturb and
            all(is_number(f) and f > 0 for f in perturb)):
        raise ConfigError(f"{path}.perturb", f"expected a list of factors > 0, such as "
                                             f"[0.8, 1.2]; got {perturb!r}")
    mutable = options.get("mutable")
    if mutable is not None:
        if not (isinstance(mutable, list) and all(isinstance(n, str) for n in mutable)):
            raise ConfigError(f"{path}.mutable", f"expected a list of parameter names of the "
                                                 f"space; got {mutable!r}")
        unknown = [name for name in mutable if name not in space.names]
        if unknown:
            raise ConfigError(f"{path}.mutable", f"{', '.join(unknown)} is not a parameter of "
                                                 f"the space ({', '.join(space.names)})")
    synchronous = boolean(options.get("synchronous", False), f"{path}.synchronous")
    max_epochs = options.get("max_epochs")
    if max_epochs is not None:
        max_epochs = whole_number(max_epochs, f"{path}.max_epochs", 1,
                                  expected="a whole number >= 1 (the members' last epoch)")
    return {"population": population, "max_epochs": max_epochs,
            "interval": whole_number(options.get("interval", 1), f"{path}.interval", 1,
                                     expected="a whole number >= 1 (epochs)"),
            "quantile": quantile, "resample_probability": resample,
            "perturb": [float(f) for f in perturb], "mutable": mutable,
            "synchronous": synchronous}


def _fraction(value: Any, path: str, most: float) -> float:
    if not is_number(value) or not 0 <= value <= most or (most < 1 and value == 0):
        low = "> 0" if most < 1 else ">= 0"
        raise ConfigError(path, f"expected a number {low} and <= {most:g}; got {value!r}")
    return float(value)
