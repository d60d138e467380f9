"""What a scheduler is to diel: a :class:`Scheduler`, which answers a trial's epoch reports.

The search engine (:mod:`diel.search.engine`) owns the trials; a scheduler only answers,
for each epoch report of a running trial, what the trial does next: a :class:`Decision`,
one of a small closed set of actions (:class:`Action`), all of which diel carries out:
*continue*, *stop* (a pruned trial), *pause* (the trial checkpoints and ends its run,
freeing its worker; it waits until the scheduler promotes it, :meth:`Scheduler.promote`,
and then resumes from its checkpoint on any free worker) and *exploit* (the trial goes
on from another trial's checkpoint with new parameters, as population-based training
does: the trial ends its run as on a pause and is dispatched again at once, with the new
parameters, from the donor's checkpoint of the step the decision names (the one whose
score ranked it; the engine waits for it while it is being written), read from the
donor's copy in the tuple space; a donor whose checkpoint is gone makes the trial go on from its own,
with the parameters :meth:`Scheduler.donor_gone` gives; a scheduler that exploits names
the checkpoints it needs, :meth:`Scheduler.checkpoint_every`). A scheduler declares the
actions it may answer (:attr:`Scheduler.actions`, a class or an instance attribute);
validation refuses one
whose class may answer an action this diel cannot carry out (:data:`CARRIED_OUT`), and
the engine refuses such an answer.

A scheduler sees *scores*, where larger is always better: the master computes the
pruning metric (``metric:``, by default the first objective) from each epoch report and
turns it by its ``direction:``; a report whose metric cannot be computed or is not
finite is not shown. Epochs are numbered as the worker reports them (the trainer counts
from 1). The engine calls, in this order:

1. ``Cls.from_options(name, options, path)`` (a classmethod) when the settings are
   validated, before anything runs, on every rank and by ``diel validate``: options
   refused here are a config error (exit status 2). The master's instance for the run
   comes from this call too.
2. On a resumed study, for every trial finished in an earlier run, in trial-number
   order: :meth:`Scheduler.decide` for each of its stored epochs, in epoch order (the
   answers are ignored), then :meth:`Scheduler.finish`; then, for each trial not
   finished (paused, or left running), :meth:`Scheduler.decide` for its stored epochs
   up to its latest checkpoint. A scheduler keeps nothing of its own between runs;
   diel's database is the only record, and this replay is how it gets back what it
   knew. The unfinished trials it then holds paused (:meth:`Scheduler.waiting`) wait
   for a promotion; the others resume at once.
3. Live, :meth:`Scheduler.decide` for each epoch report as it arrives (trials
   interleave), also for the reports a trial makes after a stop or a pause was ordered
   and before it ended (the engine orders at most one stop, pause or exploit a trial's
   run and ignores the later answers), so that the replay above shows a scheduler exactly what it saw
   live. A report the scheduler holds (:meth:`Scheduler.holds`) is answered later, by
   :meth:`Scheduler.answers`, which the engine reads after each report and each end. Before proposing each new trial, and whenever a worker is free, the engine asks
   :meth:`Scheduler.promote` for a paused trial to resume instead.
4. :meth:`Scheduler.finish` once for each trial that ends, with ``ok`` true when it
   completed (not failed, not pruned). A paused trial never promoted ends ``pruned``
   once nothing runs that could promote it (as it would have in stop mode), and one
   whose function made no checkpoint ends ``pruned`` at once: it cannot resume without
   training its epochs again.

So a scheduler must answer the same reports with the same answers (it may not draw
random numbers unseeded, nor look at the clock), and its state after a set of finished
trials must not depend on how their reports interleaved: a resumed study then decides as
the live run would have. A promotion is the one thing a scheduler learns other than
from reports: it records it when :meth:`Scheduler.promote` names the trial, and must
learn it again from the reports on a resume (halving and hyperband: when the promoted
trial reaches its next rung; one promoted but interrupted before that waits again after
a resume, and is promoted again as soon as it is among the top).
:mod:`diel.testing.schedulers` checks all of this for any scheduler class.

Third-party schedulers are classes registered in the entry-point group
``diel.schedulers`` (:mod:`diel.search.schedulers.registry`); ``pruner: NAME`` or
``pruner: {NAME: {..}}`` selects one. Not thread safe: the master's loop owns its
scheduler.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Mapping

from diel.checks import no_unknown_keys, unknown_key_message
from diel.search.protocol import DecisionPoints

__all__ = ["Action", "Decision", "CARRIED_OUT", "SHARED_OPTIONS", "Scheduler", "Pruner",
           "check_option_names"]


class Action(enum.Enum):
    """What a trial does after an epoch report."""

    CONTINUE = "continue"   # train on
    STOP = "stop"           # stop now: the trial ends ``pruned``
    PAUSE = "pause"         # checkpoint and end this run; resume when promoted
    EXPLOIT = "exploit"     # go on from a donor trial's checkpoint, with new params


#: The actions this diel carries out; a scheduler declaring another is refused.
CARRIED_OUT = frozenset({Action.CONTINUE, Action.STOP, Action.PAUSE, Action.EXPLOIT})

#: Options of every scheduler that the master reads, not the scheduler: ``metric`` (an
#: expression over the epoch metrics) and ``direction`` (``maximize`` or ``minimize``).
SHARED_OPTIONS = ("metric", "direction")


@dataclass(frozen=True)
class Decision:
    """A scheduler's answer to one epoch report: an :class:`Action` and, for *exploit*,
    the ``donor`` trial whose checkpoint to continue from, the new ``params`` and the
    donor's ``step`` to go on from (the epoch whose score ranked it a donor; None: its
    latest durable checkpoint). Build one with :meth:`continue_`, :meth:`stop`,
    :meth:`pause` or :meth:`exploit`."""

    action: Action
    donor: int | None = None
    params: Mapping[str, Any] | None = None
    step: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.action, Action):
            raise TypeError(f"a Decision's action is an Action, not {self.action!r}")
        exploit = self.action is Action.EXPLOIT
        if exploit != (self.donor is not None) or exploit != (self.params is not None) or \
                (not exploit and self.step is not None):
            raise ValueError("an exploit decision carries a donor trial, new params and "
                             f"perhaps the donor's step; no other does (got {self!r})")

    @classmethod
    def continue_(cls) -> "Decision":
        """The trial trains on."""
        return cls(Action.CONTINUE)

    @classmethod
    def stop(cls) -> "Decision":
        """The trial stops now and is recorded ``pruned``."""
        return cls(Action.STOP)

    @classmethod
    def pause(cls) -> "Decision":
        """The trial ends this run and resumes later from its checkpoint."""
        return cls(Action.PAUSE)

    @classmethod
    def exploit(cls, donor: int, params: Mapping[str, Any],
                step: int | None = None) -> "Decision":
        """The trial goes on from trial ``donor``'s checkpoint of ``step`` (None: its
        latest durable one) with ``params``."""
        return cls(Action.EXPLOIT, donor, dict(params), step)


class Scheduler(ABC):
    """A scheduler (see the module docstring for the order of calls)."""

    #: The actions this scheduler may answer (default: continue and stop; one that
    #: pauses declares pause). A scheduler that may answer one outside
    #: :data:`CARRIED_OUT` is refused by validation, naming it.
    actions: frozenset[Action] = frozenset({Action.CONTINUE, Action.STOP})

    @classmethod
    def from_options(cls, name: str, options: Mapping[str, Any], path: str) -> "Scheduler":
        """A new scheduler from the workflow's options (``pruner: {NAME: {...}}`` less
        :data:`SHARED_OPTIONS`; empty for ``pruner: NAME``), or :class:`ConfigError`
        naming the key path of a wrong one (``path`` is the options' own,
        ``modules.search.settings.pruner.NAME``). ``name`` is the scheduler's name in the
        workflow. This default takes no options and calls ``cls()``; a scheduler with
        options overrides it, checking them with :mod:`diel.checks` and
        :func:`check_option_names` (raising :class:`~diel.errors.ConfigError`)."""
        check_option_names(options, (), path)
        return cls()

    @abstractmethod
    def decide(self, trial: int, epoch: int, score: float) -> Decision:
        """Record ``score`` (larger is better) of trial number ``trial`` at ``epoch``
        and answer what the trial does next: an action among :attr:`actions`. Called on
        the master's loop, so it should take microseconds, not seconds."""

    def decision_points(self, trial: int) -> DecisionPoints:
        """The epochs at which this scheduler may answer trial ``trial``'s report with
        anything but continue. A report there waits for the master's answer before
        ``trial.report`` returns (a round trip to the master), so that the order takes
        effect at that very report; any other report goes on at once. This default is
        every epoch; a scheduler that decides only at some (rungs, after a warm-up)
        names them, and must never answer otherwise elsewhere."""
        return DecisionPoints()

    def promote(self) -> int | None:
        """A trial this scheduler paused to resume now (it no longer waits), or None.
        Only a scheduler that answers *pause* overrides it; this default has none."""
        return None

    def waiting(self) -> frozenset[int]:
        """The trials this scheduler paused and has not promoted (default: none)."""
        return frozenset()

    def checkpoint_every(self) -> int | None:
        """Epochs between the checkpoints this scheduler needs of every trial (a trial's
        ``trial.should_checkpoint`` is true at their multiples, and each durable
        checkpoint keeps its copy in the tuple space, where an exploit reads it), or
        None (the default): none needed. A scheduler that exploits names its interval."""
        return None

    def donor_gone(self, trial: int) -> Mapping[str, Any] | None:
        """The exploit answered for ``trial`` cannot be carried out: its donor's
        checkpoint is gone (the donor finished, or its checkpoint was not kept). The
        parameters ``trial`` goes on with from its own latest checkpoint instead (a
        scheduler that exploits resamples them), or None (the default): as it was."""
        return None

    def holds(self, trial: int, epoch: int) -> bool:
        """True when the answer to ``trial``'s report of ``epoch`` waits for other trials'
        reports (synchronous population-based training: a generation is decided once all
        its members reported): :meth:`decide`'s answer to that report is not used, and
        the real one comes later from :meth:`answers`. Such an epoch is one of the
        trial's decision points, so its worker waits. This default holds none."""
        return False

    def answers(self) -> list[tuple[int, int, Decision]]:
        """The answers ``(trial, epoch, decision)`` to held reports (:meth:`holds`)
        decided since the last call (in :meth:`decide` or :meth:`finish`, when a
        generation became complete). The engine carries out those of reports it holds
        live and ignores the others (a replay's). This default has none."""
        return []

    def finish(self, trial: int, ok: bool) -> None:
        """Trial ``trial`` ended; ``ok`` when it completed (not failed or pruned). It may
        never have reported an epoch. This default forgets nothing and keeps nothing."""


class Pruner(Scheduler):
    """A scheduler that continues or stops trials (median, halving, hyperband): it
    answers :meth:`should_prune`, and :meth:`decide` turns that into a Decision (halving
    and hyperband in promotion mode turn it into a pause instead of a stop)."""

    actions = frozenset({Action.CONTINUE, Action.STOP})

    @abstractmethod
    def should_prune(self, trial: int, epoch: int, score: float) -> bool:
        """Record ``score`` of ``trial`` at ``epoch``; True to stop the trial now."""

    def decide(self, trial: int, epoch: int, score: float) -> Decision:
        """Stop when :meth:`should_prune` says so, else continue."""
        return Decision.stop() if self.should_prune(trial, epoch, score) \
            else Decision.continue_()


def check_option_names(options: Mapping[str, Any], names: tuple[str, ...], path: str) -> None:
    """Raise :class:`ConfigError` at ``path.KEY`` for an option that is neither one of
    the scheduler's ``names`` nor one of :data:`SHARED_OPTIONS` (which the master removed
    before the scheduler sees its options), with the closest one as a hint."""
    known = [*names, *SHARED_OPTIONS]
    no_unknown_keys(options, names, path, lambda key: unknown_key_message(key, known, "option"))
