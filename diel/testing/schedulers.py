"""The conformance suite of a scheduler: :class:`SchedulerSuite`.

It checks a :class:`~diel.search.schedulers.Scheduler` class against the contract in
:mod:`diel.search.schedulers.base`, by calling it as the search engine does, over a made-up
study whose trials report interleaved epochs (a few at a time, as workers run them),
report one more epoch after a stop or a pause (as a worker may, before it sees the
order), and sometimes fail; a paused trial waits until :meth:`Scheduler.promote` names it
(asked before each new trial starts), then reports on from where it paused, and the
trials still waiting when nothing else runs end pruned, as the engine does:

* ``from_options`` makes an instance from the suite's options;
* it declares its actions (the instance's) as a set of
  :class:`~diel.search.schedulers.Action`, continue among them, and only ones this diel
  carries out;
* every answer is a :class:`~diel.search.schedulers.Decision` with a declared action
  (an exploit names another trial as its donor); ``promote`` names only a trial it
  paused and has not promoted (one of ``waiting()``);
* ``finish`` is taken for trials that never reported, and answers go on after it;
* the same reports get the same answers (two instances agree);
* a resumed study decides as the live run would: an instance shown the finished trials
  trial by trial, in number order (as the engine replays them), answers new reports as
  the instance that saw them live and interleaved.

Subclass it in a test module and name the class; set the options (and the trials' length,
``epochs``) where the defaults do not fit::

    class TestPatience(SchedulerSuite):
        scheduler_class = Patience
        options = {"patience": 2}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

from diel.search.schedulers.base import CARRIED_OUT, Action, Decision, Scheduler

__all__ = ["SchedulerSuite", "History"]


def _expect(condition: bool, message: str) -> None:
    """Fail the check (an AssertionError, whether or not Python runs with -O)."""
    if not condition:
        raise AssertionError(message)


@dataclass
class History:
    """What a scheduler answered over a made-up study: each report with its answer (and
    each promotion, as ``(trial, epoch, 0.0, None)``), and each finished trial's reports
    (epoch, score) and whether it completed."""

    answers: list[tuple[int, int, float, Decision | None]] = field(default_factory=list)
    reports: dict[int, list[tuple[int, float]]] = field(default_factory=dict)
    completed: dict[int, bool] = field(default_factory=dict)


class SchedulerSuite:
    """The checks every scheduler class must pass (see the module docstring)."""

    #: The class under test.
    scheduler_class: ClassVar[type[Scheduler]]
    #: Its name, as ``pruner: NAME`` would give it.
    name: ClassVar[str] = "under_test"
    #: Its own options, as ``pruner: {NAME: {...}}`` would give them (without the
    #: master's ``metric`` and ``direction``).
    options: ClassVar[Mapping[str, Any]] = {}
    #: A trial's full length in epochs.
    epochs: ClassVar[int] = 9
    #: Trials in the made-up study, and how many run at once.
    trials: ClassVar[int] = 24
    workers: ClassVar[int] = 4

    # -- helpers --------------------------------------------------------------------

    def make(self) -> Scheduler:
        """A new scheduler, as validation makes one from the workflow's options."""
        scheduler = self.scheduler_class.from_options(self.name, dict(self.options),
                                                      f"pruner.{self.name}")
        _expect(isinstance(scheduler, self.scheduler_class),
                f"from_options returned {scheduler!r}, not a {self.scheduler_class.__name__}")
        return scheduler

    def score(self, trial: int, epoch: int) -> float:
        """Trial ``trial``'s made-up score at ``epoch`` (larger is better): a learning
        curve whose height varies from trial to trial."""
        quality = (trial * 37 % 11) / 10
        return quality * (1 - 0.5 ** epoch) + 0.01 * ((trial + epoch) % 3)

    def fails(self, trial: int) -> bool:
        """Whether trial ``trial`` fails (after its second epoch)."""
        return trial % 7 == 6

    def run(self, scheduler: Scheduler, numbers: range) -> History:
        """Run trials ``numbers``, ``workers`` at a time, as the engine would show them to
        ``scheduler``: every running trial reports its next epoch in turn; a trial told
        to stop reports one more epoch (answer ignored) and ends pruned; a trial told to
        pause reports one more epoch and waits, and a promoted one (asked before each new
        trial starts; one that ``waiting()`` no longer names first, as the engine does)
        reports on from there; a trial ends ok at ``epochs``, or failed;
        the trials still waiting once nothing runs and nothing starts end pruned."""
        history = History()
        new, running = list(numbers), {}   # trial -> [epoch, order (an Action or None)]
        paused: dict[int, int] = {}        # trial -> the epoch it paused at
        while new or running or paused:
            while len(running) < self.workers:
                held = scheduler.waiting()
                promoted = next((n for n in sorted(paused) if n not in held), None)
                if promoted is None:
                    promoted = scheduler.promote()
                    _expect(promoted is None or promoted in paused, f"promote() named trial "
                                                                    f"{promoted}, which is not "
                                                                    "waiting")
                if promoted is not None:
                    history.answers.append((promoted, paused[promoted], 0.0, None))
                    running[promoted] = [paused.pop(promoted), None]
                elif new:
                    running[new.pop(0)] = [0, None]
                else:
                    break
            if not running:   # nothing runs that could promote the waiting trials
                for trial in sorted(paused):
                    scheduler.finish(trial, False)
                    history.completed[trial] = False
                paused = {}
                continue
            for trial in sorted(running):
                state = running[trial]
                state[0] += 1
                epoch, score = state[0], self.score(trial, state[0])
                decision = scheduler.decide(trial, epoch, score)
                self.check_answer(decision, trial, epoch, scheduler.actions)
                history.answers.append((trial, epoch, score, decision))
                history.reports.setdefault(trial, []).append((epoch, score))
                ordered = state[1]
                if ordered is None and decision.action in (Action.STOP, Action.PAUSE):
                    state[1] = decision.action
                failed = self.fails(trial) and epoch == 2
                if epoch == self.epochs or failed or ordered is Action.STOP:
                    completed = epoch == self.epochs and state[1] is None and not failed
                    scheduler.finish(trial, completed)
                    history.completed[trial] = completed
                    del running[trial]
                elif ordered is Action.PAUSE:
                    paused[trial] = epoch
                    del running[trial]
        return history

    def check_answer(self, decision: Any, trial: int, epoch: int,
                     actions: frozenset[Action] | None = None) -> None:
        """Fail unless ``decision`` is one the scheduler declared it may give (among
        ``actions``, the instance's; by default its class's)."""
        where = f"decide({trial}, {epoch}, ...)"
        _expect(isinstance(decision, Decision), f"{where} returned {decision!r}, not a Decision")
        declared = self.scheduler_class.actions if actions is None else actions
        _expect(decision.action in declared,
                f"{where} answered {decision.action.value}, which "
                f"{self.scheduler_class.__name__}.actions does not declare")
        if decision.action is Action.EXPLOIT:
            _expect(decision.donor != trial, f"{where} exploits the trial's own checkpoint")

    # -- the checks -----------------------------------------------------------------

    def test_from_options_makes_the_scheduler(self) -> None:
        self.make()

    def test_actions_are_declared_and_carried_out(self) -> None:
        actions = self.make().actions
        _expect(isinstance(actions, (set, frozenset)) and all(
            isinstance(action, Action) for action in actions),
            f"actions must be a set of diel.search.schedulers.Action; got {actions!r}")
        _expect(Action.CONTINUE in actions, "a scheduler must be able to let a trial continue")
        beyond = sorted(action.value for action in set(actions) - CARRIED_OUT)
        _expect(not beyond, f"this diel cannot carry out {', '.join(beyond)} yet")

    def test_answers_are_declared_actions(self) -> None:
        history = self.run(self.make(), range(self.trials))
        _expect(len(history.completed) == self.trials, "not every trial finished")

    def test_finish_is_taken_for_any_trial(self) -> None:
        scheduler = self.make()
        scheduler.finish(self.trials + 1, True)    # never reported an epoch
        scheduler.finish(self.trials + 2, False)
        self.run(scheduler, range(self.trials))

    def test_the_same_reports_get_the_same_answers(self) -> None:
        first = self.run(self.make(), range(self.trials))
        second = self.run(self.make(), range(self.trials))
        _expect(first.answers == second.answers,
                "two schedulers shown the same reports answered differently")

    def test_a_resumed_study_decides_as_the_live_run(self) -> None:
        live = self.make()
        history = self.run(live, range(self.trials))
        replayed = self.make()
        for trial in sorted(history.reports):   # the engine's replay: trial by trial
            for epoch, score in history.reports[trial]:
                replayed.decide(trial, epoch, score)
            replayed.finish(trial, history.completed[trial])
        later = range(self.trials, 2 * self.trials)
        _expect(self.run(live, later).answers == self.run(replayed, later).answers,
                "after its finished trials were replayed trial by trial, the scheduler "
                "answered new reports differently than after seeing them live")
