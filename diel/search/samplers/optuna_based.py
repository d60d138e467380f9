"""Model-based strategies on Optuna's samplers, through its ask-and-tell interface:
``tpe``, ``gp``, ``cmaes``, ``qmc`` and ``nsga2``.

Each run builds an in-memory Optuna study (diel's database stays the only record) and
fills it, on :meth:`OptunaSampler.restore`, from the trials stored in diel's database:
a proposal is ``study.ask()`` and a result ``study.tell(...)``. Optuna needs the
``search`` extra (``pip install 'diel[search]'``: optuna, cmaes, scipy, greenlet);
``gp`` needs torch too. A strategy whose library is missing is a config error naming what to
install, raised when the settings are validated.

Running trials: each proposal is an Optuna trial left ``RUNNING`` until its result is
told, so the samplers that look at running trials see them: TPE with
``constant_liar: true`` (diel's default) counts them as bad results, so that workers
asking while others run get different proposals; GP (Optuna 5) conditions its
acquisition on them (q-batch log EI). CMA-ES, QMC and NSGA-II do not look at running
trials and need not: CMA-ES draws each proposal afresh from the current generation's
distribution, QMC takes the next point of its sequence, NSGA-II breeds each child from
randomly chosen parents.

Restore: TPE and GP read only the study's trials, so stored trials are added with
``study.add_trial(create_trial(...))``. CMA-ES, QMC and NSGA-II also keep state in
Optuna's storage that a stored trial does not carry (CMA-ES's optimizer and generation,
QMC's sequence position, NSGA-II's generation), so their stored trials are replayed in
number order: enqueued with their stored parameters, asked (the sampler takes its step
for the trial as when it proposed it) and told their results.

Define-by-run and conditional spaces: each running trial keeps the Optuna trial asked
for it, so a parameter its function suggests (not declared in the space) is that
trial's ``suggest_*`` (Optuna's ask-and-tell is define-by-run), and a declared parameter
whose ``when`` does not hold is never suggested. TPE samples each parameter on its own
(``multivariate: false``, its default) and so models spaces that change from trial to
trial; with ``multivariate: true`` (and for GP, CMA-ES, QMC and NSGA-II's crossover) the
joint model covers the parameters every trial so far has (Optuna's intersection search
space), and the others are drawn by the sampler's independent sampler (random: Optuna
warns once per parameter, which ``warn_independent_sampling: false`` silences for
CMA-ES and QMC). Restore gives Optuna each stored trial with the distributions of the
parameters it has, suggested ones included.

Seeds: the Optuna sampler is seeded from the study's seed and the number of trials
restored, so two new studies with one seed propose alike, and a resumed study does not
draw again the random start-up trials it drew before it stopped.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import logging
import warnings
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from diel.checks import closest
from diel.errors import ConfigError
from diel.search.samplers.base import Observation, Sampler
from diel.search.samplers.optuna_space import axes, optuna_distribution, suggest
from diel.search.space import KINDS, SearchSpace

__all__ = ["OptunaSampler", "TPESampler", "GPSampler", "CmaEsSampler", "QMCSampler",
           "NSGAIISampler"]

EXTRA = "pip install 'diel[search]'"
log = logging.getLogger("diel.search")
# Option types a YAML mapping can give, by the name Optuna's signatures annotate them with.
_YAML_TYPES: dict[str, tuple[type, ...]] = {
    "bool": (bool,), "int": (int,), "float": (int, float), "str": (str,), "None": (type(None),)}


class OptunaSampler(Sampler):
    """An Optuna sampler behind diel's :class:`Sampler` interface. A subclass names the
    Optuna class and what it needs; its options are that class's keyword arguments that
    take plain values (numbers, booleans, strings), less ``seed`` (the search's own)."""

    optuna_class: ClassVar[str]                        # a class of optuna.samplers
    needs: ClassVar[tuple[tuple[str, str, str], ...]] = ()  # (module, library, install)
    defaults: ClassVar[dict[str, Any]] = {}            # diel's defaults for its options
    replays: ClassVar[bool] = False                    # keeps state: restore replays asks
    one_objective: ClassVar[bool] = False              # cannot take several objectives
    learns_from_results = True
    suggests = True

    @classmethod
    def check(cls, name: str, space: SearchSpace, directions: Sequence[str],
              options: Mapping[str, Any], path: str) -> None:
        try:
            importlib.import_module("optuna")
        except ImportError as exc:
            raise ConfigError(path, f"strategy {name} needs Optuna: {EXTRA} ({exc})") from None
        for module, library, install in cls.needs:   # found, not imported: every rank checks
            if importlib.util.find_spec(module) is None:
                raise ConfigError(path, f"strategy {name} needs {library}: {install}")
        if cls.one_objective and len(directions) > 1:
            raise ConfigError(path, f"strategy {name} optimizes one objective; this search "
                                    f"has {len(directions)} (grid, random, qmc, tpe, gp and nsga2 "
                                    f"take several)")
        accepted = cls.accepted_options()
        for key, value in options.items():
            if key == "seed":
                raise ConfigError(f"{path}.seed", "the seed is a setting of the search "
                                                  "itself (seed:), not of its strategy")
            if key not in accepted:
                hint = closest(key, accepted)
                guess = f"did you mean {hint}? " if hint else ""
                raise ConfigError(f"{path}.{key}", f"unknown option of strategy {name}; "
                                                   f"{guess}its options: {', '.join(accepted)}")
            types = accepted[key]
            if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
                expected = " or ".join(t.__name__.replace("NoneType", "null") for t in types)
                raise ConfigError(f"{path}.{key}", f"expected {expected}; got {value!r}")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cls._optuna_sampler(options, seed=0)
        except (ValueError, TypeError) as exc:   # Optuna's own check of the values
            raise ConfigError(path, f"strategy {name}: {exc}") from None

    @classmethod
    def accepted_options(cls) -> dict[str, tuple[type, ...]]:
        """The options (keyword arguments of the Optuna class) a workflow can set, with
        the types each takes."""
        optuna_class = getattr(importlib.import_module("optuna.samplers"), cls.optuna_class)
        accepted = {}
        for parameter in inspect.signature(optuna_class.__init__).parameters.values():
            if parameter.name in ("self", "seed") or parameter.kind in (
                    parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                continue
            annotation = parameter.annotation
            names = [part.strip() for part in (annotation if isinstance(annotation, str)
                                               else getattr(annotation, "__name__", "")).split("|")]
            if all(part in _YAML_TYPES for part in names):
                accepted[parameter.name] = tuple(t for part in names for t in _YAML_TYPES[part])
        return accepted

    @classmethod
    def _optuna_sampler(cls, options: Mapping[str, Any], seed: int) -> Any:
        """The Optuna sampler for ``options`` over diel's defaults."""
        optuna_class = getattr(importlib.import_module("optuna.samplers"), cls.optuna_class)
        return optuna_class(**{**cls.defaults, **options}, seed=seed)

    def __init__(self, space: SearchSpace, directions: Sequence[str], seed: int,
                 options: Mapping[str, Any], mode: str) -> None:
        super().__init__(space, directions, seed, options, mode)
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)  # no line per trial on stderr
        self._optuna = optuna
        self._axes = axes(space)
        self._running: dict[int, Any] = {}   # diel number -> the Optuna trial asked for it
        self._study: Any = None              # made by restore

    def _new_study(self, restored: int) -> Any:
        """An empty in-memory study whose sampler is seeded from the study's seed and the
        number of trials restored into it."""
        seed = int(np.random.SeedSequence([self.seed, restored]).generate_state(1)[0])
        return self._optuna.create_study(directions=list(self.directions),
                                         sampler=self._optuna_sampler(self.options, seed))

    def restore(self, trials: Sequence[Observation]) -> None:
        self._study = self._new_study(restored=len(trials))
        self._running = {}
        for trial in trials:
            if self.replays or trial.status == "running":
                self._replay(trial)
            else:
                self._add(trial)
        if trials:
            kept = self._study.get_trials(deepcopy=False)
            running = sum(t.state == self._optuna.trial.TrialState.RUNNING for t in kept)
            log.info("%s: Optuna study rebuilt from the database with %d finished and %d "
                     "running trial(s)", type(self._study.sampler).__name__,
                     len(kept) - running, running)

    @property
    def study(self) -> Any:
        """The in-memory Optuna study the proposals come from (to read, not to change)."""
        return self._study

    def _add(self, trial: Observation) -> None:
        """A finished trial added as it is (for samplers that only read the trials)."""
        states = self._optuna.trial.TrialState
        values = list(trial.values) if trial.values is not None else None
        state = {"ok": states.COMPLETE, "pruned": states.PRUNED, "failed": states.FAIL}[
            trial.status]
        if state == states.COMPLETE and values is None:
            state = states.FAIL
        if state != states.COMPLETE:
            values = values if state == states.PRUNED and len(self.directions) == 1 else None
        params, distributions = self._stored(trial)
        self._study.add_trial(self._optuna.trial.create_trial(
            state=state, values=values, params=params, distributions=distributions,
            intermediate_values={0: values[0]} if state == states.PRUNED and values else None))

    def _stored(self, trial: Observation) -> tuple[dict[str, Any], dict[str, Any]]:
        """A stored trial's parameters and their distributions in Optuna's terms: the
        declared ones it has (an inactive conditional one is absent) and the ones its
        function suggested."""
        params = {a.name: a.to_optuna(trial.params[a.name]) for a in self._axes
                  if a.name in trial.params}
        distributions = {a.name: a.distribution() for a in self._axes if a.name in params}
        for name, distribution in trial.distributions.items():
            if name in trial.params and name not in params:
                params[name] = trial.params[name]
                distributions[name] = optuna_distribution(distribution)
        return params, distributions

    def _replay(self, trial: Observation) -> None:
        """A stored trial asked again with its stored parameters, letting the sampler take
        its step for it; told its result when it has one, else left running."""
        params, _ = self._stored(trial)
        self._study.enqueue_trial(params)
        asked = self._study.ask()
        if self.replays:
            _ = asked.relative_params   # the sampler's step (its state moves on as it did)
        for axis in self._axes:
            if axis.name in params:
                axis.suggest(asked)
        for name, distribution in trial.distributions.items():
            if name in params:
                suggest(asked, name, distribution)
        if trial.status == "running":
            self._running[trial.number] = asked
        else:
            self._finish(asked, trial.values, trial.status)

    def propose(self, number: int) -> dict[str, Any] | None:
        if self._study is None:   # not restored: a new study
            self.restore([])
        asked = self._study.ask()
        params: dict[str, Any] = {}
        for axis in self._axes:
            if axis.param.active(params):
                params[axis.name] = axis.to_diel(axis.suggest(asked))
        self._running[number] = asked
        return params

    def suggest(self, number: int, name: str, distribution: Mapping[str, Any]) -> Any:
        asked = self._running.get(number)
        if asked is None:
            raise ValueError(f"trial {number} is not running in this search")
        try:
            return suggest(asked, name, distribution)
        except ValueError as e:   # Optuna's: e.g. another distribution for the same name
            raise ValueError(f"Optuna refused suggesting {name!r}: {e}") from None

    def tell(self, number: int, params: Mapping[str, Any], values: tuple[float, ...] | None,
             status: str) -> None:
        asked = self._running.pop(number, None)
        if asked is not None:
            self._finish(asked, values, status)

    def _finish(self, asked: Any, values: tuple[float, ...] | None, status: str) -> None:
        """Tell Optuna how ``asked`` ended. A pruned trial of a one-objective study with
        a value reports it as its last intermediate value, which Optuna's tell takes as
        the pruned trial's value (as when Optuna's own pruner stops a trial)."""
        states = self._optuna.trial.TrialState
        if status == "ok" and values is not None:
            self._study.tell(asked, list(values))
        elif status == "pruned":
            if values is not None and len(self.directions) == 1:
                asked.report(values[0], 0)
            self._study.tell(asked, state=states.PRUNED)
        else:
            self._study.tell(asked, state=states.FAIL)


_SCIPY = ("scipy", "SciPy", EXTRA)


class TPESampler(OptunaSampler):
    """``strategy: tpe``: Optuna's Tree-structured Parzen Estimator; running trials are
    counted as bad results (``constant_liar: true`` by default)."""

    optuna_class = "TPESampler"
    defaults = {"constant_liar": True}


class GPSampler(OptunaSampler):
    """``strategy: gp``: Gaussian-process Bayesian optimization (log EI; q-batch with
    running trials); needs torch and SciPy.

    The master runs torch on one thread: it shares its node with worker ranks, and the
    GP's small matrices gain nothing from more, while oversubscribed cores made each
    proposal about four times slower on a busy 2-core machine (as Optuna's documentation
    warns, recommending ``OMP_NUM_THREADS=1``)."""

    optuna_class = "GPSampler"
    needs = (("torch", "PyTorch", "pip install torch==2.13.0 (or 'diel[examples]')"), _SCIPY)

    def __init__(self, space: SearchSpace, directions: Sequence[str], seed: int,
                 options: Mapping[str, Any], mode: str) -> None:
        super().__init__(space, directions, seed, options, mode)
        import torch

        torch.set_num_threads(1)


class CmaEsSampler(OptunaSampler):
    """``strategy: cmaes``: CMA-ES (the ``cmaes`` package) over numeric parameters; one
    objective."""

    optuna_class = "CmaEsSampler"
    needs = (("cmaes", "the cmaes package", EXTRA),)
    kinds = tuple(k for k in KINDS if k not in ("values", "choice"))
    replays = True
    one_objective = True


class QMCSampler(OptunaSampler):
    """``strategy: qmc``: a quasi-Monte Carlo sequence (Sobol by default, from SciPy)."""

    optuna_class = "QMCSampler"
    needs = (_SCIPY,)
    replays = True
    learns_from_results = False   # a fixed sequence: results change nothing


class NSGAIISampler(OptunaSampler):
    """``strategy: nsga2``: the NSGA-II genetic algorithm, for several objectives (one
    works too)."""

    optuna_class = "NSGAIISampler"
    replays = True

