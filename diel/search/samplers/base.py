"""What a search strategy is to diel: a :class:`Sampler`.

The search engine (:mod:`diel.search.engine`) owns the study's bookkeeping (numbers,
stop rules, the database); a sampler only decides which parameters to try next, from
what it has been shown of the study. The engine talks to it in this order:

1. ``Sampler.check(...)`` (a classmethod) when the settings are validated, before
   anything runs: options and space refused here are a config error (exit status 2).
2. ``sampler = Cls(space, directions, seed, options, mode)``, once per run.
3. ``sampler.restore(trials)``, once, before the first proposal: every trial the study
   already has in diel's database (finished ones with their results, and ones left
   ``running`` by an earlier run that the engine will dispatch again), in number order.
   A new study restores an empty list. diel's database is the only record: a sampler
   keeps nothing of its own between runs, and rebuilds what it needs from these trials.
4. ``sampler.propose(number)`` for each new trial: its parameters, or ``None`` when the
   strategy has nothing left to propose (a grid that is done); the trial is running from
   then on. Trials left running by an earlier run are not proposed again: they are known
   from :meth:`restore` and dispatched by the engine under their old numbers.
5. ``sampler.tell(number, params, values, status)`` once for each trial that finished,
   proposed or restored as running, before the next proposal: the engine keeps the
   results and tells them in trial-number order just before it asks for the next trial
   (results that come after the last proposal are not told). So in batch mode (a group
   is proposed only once the previous group has finished) a sampler sees the same
   history, in the same order, on every run.

A trial that the engine takes back before any worker started it (when a stop rule fires)
is never told: no trial is proposed after that.

Define-by-run: a sampler whose :attr:`Sampler.suggests` is True also answers
``sampler.suggest(number, name, distribution)`` while trial ``number`` runs (between its
proposal and :meth:`tell`): the value of a parameter the trial's function asked for with
``trial.suggest_*`` that the space does not declare. The trial's proposal holds only
the declared parameters; the suggested ones reach :meth:`tell` in ``params`` and
:meth:`restore` in ``Observation.params`` with their ``Observation.distributions``. A
space may be empty then (no ``space:`` at all), and conditional parameters (``when``)
are absent from a trial's params when inactive.

Third-party samplers are classes registered in the entry-point group ``diel.samplers``
(:mod:`diel.search.samplers.registry`); ``strategy: NAME`` or ``strategy: {NAME: {..}}``
selects one. Not thread safe: the master's loop owns its sampler.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Sequence

from diel.checks import no_unknown_keys
from diel.results import FINISHED
from diel.search.space import KINDS, SearchSpace

if TYPE_CHECKING:
    from diel.search.schedulers import Scheduler

__all__ = ["Sampler", "Observation", "FINISHED"]


@dataclass(frozen=True)
class Observation:
    """One trial of the study as a sampler is shown it on :meth:`Sampler.restore`.

    ``status`` is ``running`` (dispatched, no result yet) or one of :data:`FINISHED`.
    ``values`` holds one number per objective, in the order of the sampler's
    ``directions``, for ``ok`` trials and for ``pruned`` trials whose objective could be
    computed from their last metrics; otherwise None. ``distributions``: the
    parameters the trial's function suggested (not declared in the space), by name, in
    diel's JSON form (:mod:`diel.search.distributions`).
    """

    number: int
    params: dict[str, Any]
    status: str
    values: tuple[float, ...] | None = None
    distributions: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


class Sampler(ABC):
    """A search strategy (see the module docstring for the order of calls).

    ``space`` is the parsed search space; ``directions`` one of ``maximize`` or
    ``minimize`` per objective (a study with one objective has one); ``seed`` the study's
    random seed (given, or drawn once and stored with the study); ``options`` the
    strategy's options from ``strategy: {NAME: {...}}`` as checked by :meth:`check`
    (empty for ``strategy: NAME``); ``mode`` is ``batch`` (groups of one trial per worker,
    each proposed once the previous group finished) or ``async`` (a trial proposed the
    moment a worker is free, while others run).
    """

    #: The space kinds (diel.search.space.KINDS) this strategy can search; a space with
    #: another kind is refused by validation, naming the kind and the strategy.
    kinds: ClassVar[tuple[str, ...]] = KINDS

    #: True when a proposal depends on the results told so far. The master then queues
    #: no task ahead of a free worker under ``prefetch: auto`` (each proposal waits for
    #: the latest results); a strategy that does not learn gets a deeper queue instead.
    learns_from_results: ClassVar[bool] = False

    #: True for a strategy that runs its trials with a scheduler of its own
    #: (:meth:`scheduler`, pbt's), in place of the search's ``pruner:`` (then refused
    #: beside it), ranking them by the objective; it proposes a fixed set of trials, so
    #: its search needs no ``max_trials`` to end.
    schedules: ClassVar[bool] = False

    #: True when the strategy answers :meth:`suggest` (define-by-run): a search whose
    #: strategy does not needs a declared ``space:``.
    suggests: ClassVar[bool] = False

    #: True when the strategy draws with NumPy's random module: the master loads it
    #: before MPI starts (:func:`diel.search.master.prepare`), not at the first proposal,
    #: while every worker waits for its first task.
    draws: ClassVar[bool] = True

    def __init__(self, space: SearchSpace, directions: Sequence[str], seed: int,
                 options: Mapping[str, Any], mode: str) -> None:
        self.space = space
        self.directions = tuple(directions)
        self.seed = seed
        self.options = dict(options)
        self.mode = mode

    @classmethod
    def check(cls, name: str, space: SearchSpace, directions: Sequence[str],
              options: Mapping[str, Any], path: str) -> None:
        """Raise :class:`~diel.errors.ConfigError` when this strategy cannot run with ``options`` over
        ``space`` for these objective ``directions`` (a library it needs is missing
        included). ``name`` is the strategy's name in the workflow and ``path`` the key
        path of its options (``modules.search.settings.strategy.NAME``). The space's
        kinds were already checked against :attr:`kinds`. This default accepts no
        options; a sampler with options overrides it."""
        no_unknown_keys(options, (), path, lambda key: f"strategy {name} takes no options")

    @classmethod
    def size(cls, space: SearchSpace) -> int | None:
        """How many distinct trials this strategy can propose over ``space`` in all (a
        grid: its points), or None when it never runs out; a search whose strategy never
        runs out needs ``max_trials`` or ``time_budget`` to end."""
        return None

    @classmethod
    def completed(cls, options: Mapping[str, Any], max_trials: int | None,
                  workers: int | None, path: str) -> dict[str, Any]:
        """``options`` (checked by :meth:`check`) with what the strategy takes from the
        search filled in: its ``max_trials`` setting and, once the master knows it, the
        number of ``workers`` (None when validating); a :class:`~diel.errors.ConfigError`
        at ``path`` (the settings' key path) for a contradiction. Called when the
        settings are parsed and again before the sampler is made. This default changes
        nothing."""
        return dict(options)

    def scheduler(self) -> "Scheduler | None":
        """The scheduler of a strategy that :attr:`schedules` (made once, before
        :meth:`restore`); None for the others, whose search's ``pruner:`` names one."""
        return None

    def restore(self, trials: Sequence[Observation]) -> None:
        """Be rebuilt from the study's stored trials (number order; running ones will
        be told when they finish). Called once, before the first :meth:`propose`. This
        default keeps nothing: for strategies that do not learn from results."""

    @abstractmethod
    def propose(self, number: int) -> dict[str, Any] | None:
        """The parameters of new trial ``number`` (numbers only grow), a mapping of every
        parameter of the space to a value of its kind; or None when the strategy has
        nothing left to propose, which ends the search once the running trials finish.
        The trial counts as running from here until :meth:`tell`. Called on the master's
        loop, so it should take milliseconds, not seconds."""

    def suggest(self, number: int, name: str, distribution: Mapping[str, Any]) -> Any:
        """The value of parameter ``name`` for running trial ``number``, drawn from
        ``distribution`` (diel's JSON form, already checked); asked once per trial and
        name. ValueError with a reason the trial fails with when it cannot be served.
        Only for strategies whose :attr:`suggests` is True."""
        raise ValueError(f"this strategy ({type(self).__name__}) cannot suggest parameters "
                         "the space does not declare; declare it in space:")

    def tell(self, number: int, params: Mapping[str, Any], values: tuple[float, ...] | None,
             status: str) -> None:
        """Trial ``number`` (with ``params``) finished with ``status`` (one of
        :data:`FINISHED`); ``values`` as in :class:`Observation`. This default ignores
        it: for strategies that do not learn from results."""
