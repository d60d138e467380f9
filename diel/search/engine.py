"""The search master's logic, apart from any transport: what to dispatch next, what a
report means, when to stop. :mod:`diel.search.master` moves the messages; this module
decides, so it is unit-tested without a tuple space.

What to try next is the strategy's: the engine asks its sampler
(:mod:`diel.search.samplers`), restored from the study's stored trials, for each new
trial, and tells it each result (in trial-number order, just before the next proposal).
The engine has no branch on the strategy. Likewise what a running trial does after each
epoch is its scheduler's (:mod:`diel.search.schedulers`, the ``pruner:`` setting): the
engine shows it every epoch report's score and carries out its answer (continue, or
stop: a prune order), and replays a resumed study's stored epochs to it first.

Stop rules: the sampler has nothing left to propose (a grid is exhausted); ``max_trials``
trials (counting those finished in earlier runs of the study) have been started; the
``stop_when`` threshold was met by an ``ok`` trial; or the ``time_budget`` (seconds since
this master started) ran out. After a stop no new trial starts; trials already running
finish (as Optuna's ``timeout``).

Recovery: trials ``paused`` by an earlier master (a wall-time stop), then those it left
``running`` (the job died while they ran or were queued), are dispatched first. Until
every one of them has finished, :attr:`SearchEngine.recovering` is true and the master
queues no task ahead of its workers, so if one of them kills the job again, only trials
that really ran are charged an attempt (a trial reaching ``max_attempts`` is given up;
see diel.results._storage).

Checkpoints: a trial dispatched again resumes from its latest kept checkpoint: its task's
``restore`` (:meth:`SearchEngine.task`) names it and the older ones kept (newest
first, for a worker to fall back on when one fails its checksum), and its start records
the step (:attr:`TrialStart.resumed_from`; the store deletes the lost run's epochs after
it). Its scheduler is first shown the trial's stored epochs up to that step, as it saw
them live, and the reports that follow continue after it (one repeated at or before the
step is stored but not shown to the scheduler again). A checkpoint report is accepted for
any trial dispatched in this run, also after its result (:meth:`SearchEngine.on_checkpoint`).
A ``paused`` result (the trial stopped on request with its progress kept) does not
finish the trial: it is counted apart, not told to the sampler or the scheduler, and runs
again from its checkpoint in the next run. :meth:`SearchEngine.halt` ends the search for a
wall-time stop: nothing new starts, and :meth:`SearchEngine.pause_orders` names the
trials to order to pause.

Pauses a scheduler orders (halving and hyperband in ``mode: promotion``): the trial
checkpoints and ends its run, and waits, its row ``paused``, until the scheduler
promotes it (:meth:`~diel.search.schedulers.Scheduler.promote`, asked before each new
trial): it is then dispatched again from its latest checkpoint, so no epoch is trained
twice. A waiting trial is not finished; the search ends only once nothing runs that
could promote one, and the trials still waiting then end ``pruned`` with their last
metrics (stopped at their rung, as stop mode would have stopped them). A trial paused
without a checkpoint (its function never checkpoints) could only resume by training
again: it ends ``pruned`` at once, with a warning. On a resumed study, the unfinished
trials the replayed scheduler holds paused (:meth:`~diel.search.schedulers.Scheduler.waiting`)
wait again rather than resume at once.

Exploits a scheduler orders (``strategy: pbt``, whose sampler brings the scheduler,
:attr:`SearchEngine.scheduler`): the member's run ends ``paused`` and the member is
dispatched again at once (before any new trial, also after a stop rule) with the
exploit's parameters from the donor's checkpoint of the step the decision names (the
one whose score ranked it a donor; the newest kept when that one is gone), read from the
donor's copy in the tuple space; its start names the donor and step (a new segment of
its lineage) and its own checkpoints are superseded. While the donor runs without that
step's checkpoint recorded yet, the member waits for it (without polling: the
checkpoint's report releases it); a donor that ended first makes the member go on from its own latest
checkpoint with resampled parameters (:attr:`SearchEngine.notes` says so). A wall-time
stop, a time budget spent or ``stop_when`` met keeps a member whose exploit is pending
paused, as it was (the next run resumes it). On a resumed study, a
member killed after its exploit and before its next checkpoint goes on from the donor's
checkpoint again (:attr:`SearchEngine.donor_restores`), also when the kill left its own
checkpoints of the lineage it left kept (they are not the new segment's).

Held answers (a scheduler that :meth:`~diel.search.schedulers.Scheduler.holds` a report:
synchronous pbt's generation): :meth:`SearchEngine.on_epoch` answers such a report with
:func:`~diel.search.protocol.hold`, and :meth:`SearchEngine.released` gives the answers
once the scheduler decides them (after a report, or a member's end), or go-on for every
held one once the search stops or is cut short.

Several objectives: each result's value of every objective is computed, stored and told
to the sampler; what was "the best trial" becomes the Pareto front (its size in the
progress line). ``stop_when`` compares metrics as with one objective.

Workers are not trusted: a report's error text and string metrics are clipped to the
bounds of :mod:`diel.limits` before they are stored or logged, whatever the worker did.

Running and queued: a dispatched trial is queued until its worker's ``start`` report,
then running. While tasks wait and some worker is free (fewer trials running than
workers), :meth:`SearchEngine.untaken_for` counts the seconds since a worker last took
a task: a search whose workers serve another study, or never started, shows up there.

Resume checks (:func:`check_resumable`, :func:`rescored`): a study goes on only under the
strategy it was run with and with a space that still contains every trial it has;
changed objectives or directions are applied to the stored trials, recomputed from their
stored metrics, so that a study is never ranked under two sets of objectives.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Mapping, Sequence

from diel.checks import is_number, is_whole
from diel.errors import ConfigError
from diel.limits import CHECKSUM_CHARS, ERROR_CHARS, METRIC_TEXT_CHARS, PATH_CHARS, clip
from diel.results import Checkpoint, EpochRecord, ParetoFront, ResultRecord, StartedRecord, \
    StoredTrial, StudyState, TrialStart
from diel.search.objective import Objectives
from diel.search.protocol import PAUSE, STOP, exploit_order, go_on, hold
from diel.search.samplers import Observation, Sampler
from diel.search.schedulers import CARRIED_OUT, Action, Decision
from diel.search.settings import SearchSettings
from diel.search.space import SearchSpace, param_key

__all__ = ["SearchEngine", "FinishedTrial", "Stats", "make_sampler", "observation",
           "check_resumable", "rescored", "restore_of"]

_DIVERGENCE_METRICS = ("accuracy", "loss")
_NUMBERS = frozenset({int, float, bool, type(None)})   # metric values that need no bound


def make_sampler(settings: SearchSettings, seed: int, workers: int | None = None) -> Sampler:
    """The strategy's sampler for this run (not restored yet), with one direction per
    objective; its options completed with the number of ``workers`` (worker copies)
    where the strategy takes it (:meth:`~diel.search.samplers.Sampler.completed`)."""
    options = settings.sampler.completed(settings.strategy_options, settings.max_trials,
                                         workers, "settings")
    return settings.sampler(settings.space, settings.objectives.directions, seed, options,
                            settings.mode)


def observation(trial: StoredTrial, count: int = 1) -> Observation:
    """A stored trial as its sampler is shown it: its value of each of the ``count``
    objectives (for ok trials, and pruned ones that have them all)."""
    scores = trial.scores
    scored = trial.status in ("ok", "pruned") and len(scores) == count and \
        all(value is not None for value in scores)
    return Observation(trial.number, trial.params, trial.status,
                       tuple(scores) if scored else None,  # type: ignore[arg-type]
                       trial.distributions)


def check_resumable(settings: SearchSettings, state: StudyState, study: str, path: str) -> None:
    """Refuse, with a :class:`ConfigError` at ``path`` (the settings' key path) naming
    the change and the way out, to go on with a study whose strategy changed or whose
    trials (finished or left running) this space no longer contains: its results would
    mix two searches. A space may grow (new values, wider bounds)."""
    way_out = f"to search differently, give this run a study of its own ({path}.study)"
    if state.strategy and state.strategy != settings.strategy:
        raise ConfigError(f"{path}.strategy", f"study {study!r} was run with strategy "
                                              f"{state.strategy}, not {settings.strategy}; "
                                              f"{way_out}")
    points = {p.name: {param_key({"v": x}) for x in p.points}
              for p in settings.space.params if p.points is not None}
    outside = [(t, why) for t in state.finished + state.running
               if (why := _outside(settings.space, points, t.params, t.distributions)) is not None]
    if outside:
        trial, why = outside[0]
        shown = ", ".join(f"{k}={v!r}" for k, v in trial.params.items())
        raise ConfigError(f"{path}.space", f"study {study!r} has {len(outside)} trial(s) "
                                           f"outside this space, e.g. trial {trial.number} "
                                           f"({shown}): {why}; {way_out}")


def _outside(space: SearchSpace, points: Mapping[str, set[str]], params: Mapping[str, Any],
             suggested: Mapping[str, Any]) -> str | None:
    """Why ``params`` is not a point of ``space`` (None when it is); ``points`` holds the
    :func:`param_key` of each point of the parameters that have points. A conditional
    parameter belongs only where its condition holds; the parameters the trial's
    function ``suggested`` (define-by-run) are not the space's to check."""
    new = [p.name for p in space.params if p.name not in params and p.active(params)]
    if new:
        return f"the space adds {', '.join(new)}"
    gone = [name for name in params if name not in space.names and name not in suggested]
    if gone:
        return f"the space has no {', '.join(gone)}"
    for param in space.params:
        if param.name not in params:
            continue
        value = params[param.name]
        if param.name in points:
            if param_key({"v": value}) not in points[param.name]:
                return f"{param.name}={value!r} is not among its {param.kind} points"
        elif not _within(value, param.low, param.high, integer=param.kind == "int"):
            return f"{param.name}={value!r} is outside its {param.kind} [{param.low}, {param.high}]"
    return None


def _within(value: Any, low: float | None, high: float | None, integer: bool) -> bool:
    """``value`` is a number in ``[low, high]`` (ends within float rounding; an integer
    when ``integer``)."""
    if _float_or_none(value) is None or low is None or high is None or \
            (integer and not isinstance(value, int)):
        return False
    return low <= value <= high or math.isclose(value, low) or math.isclose(value, high)


def rescored(settings: SearchSettings,
             state: StudyState) -> dict[int, tuple[float | None, ...] | None] | None:
    """None when the study's stored objectives (expressions and directions) are this
    run's; else every stored trial's values under this run's: recomputed from its stored
    metrics (the last epoch's, then the result's) for ``ok`` and ``pruned`` trials
    (None for a value whose metrics it lacks), None for the rest. Empty when only
    directions changed (the values stay; the ranking turns)."""
    objectives = settings.objectives
    stored = state.objectives   # one (expression, direction) pair for one objective
    if tuple(stored) == objectives.specs:
        return None
    if [text for text, _ in stored] == [text for text, _ in objectives.specs]:
        return {}
    scores: dict[int, tuple[float | None, ...] | None] = {}
    for trial in state.finished + state.running:
        values = None
        if trial.status in ("ok", "pruned"):
            last = trial.epochs[max(trial.epochs)] if trial.epochs else {}
            values = tuple(_finite(v) for v in objectives.values({**last, **trial.values}))
        scores[trial.number] = values
    return scores


@dataclass
class _Running:
    start: TrialStart
    queued_at: datetime | None = None    # its task was put (the master's clock, once known)
    started_at: datetime | None = None   # a worker took the task (None: still queued)
    prune_sent: bool = False
    pause_sent: bool = False
    paused_at_rung: bool = False   # its pause was its scheduler's (not a wall-time stop)
    last_metrics: dict[str, Any] = field(default_factory=dict)
    restore: dict[str, Any] | None = None   # the checkpoint it resumes from (its task's)
    promoted_from: "_Waiting | None" = None   # the wait a promotion ended
    exploit: Decision | None = None   # the exploit ordered: its run ends, it goes on


@dataclass
class _Waiting:
    """A trial its scheduler paused, waiting to be promoted: its last run and the result
    that ended it (the trial's record if it is never promoted)."""

    run: _Running
    result: Mapping[str, Any]


def _exploited_from(trial: StoredTrial, state: StudyState) -> tuple[int, Checkpoint] | None:
    """For a trial left unfinished whose last segment is an exploit (another trial's
    checkpoint) and which has made no checkpoint of its own since: the donor and its
    checkpoint it went on from, when the study still keeps it (the trial resumes from
    it, as the exploit did); else None.

    An own checkpoint is of the new segment only at a step after the exploit's that the
    trial reported: the exploit's start deleted the trial's epochs after that step in
    the transaction that recorded the segment, while its own checkpoints of the lineage
    it left are marked deleted in the master's next one, so a kill between the two
    leaves them kept, at steps with no epoch."""
    last = trial.segments[-1] if trial.segments else None
    if last is None or last.parent_trial in (None, trial.number) or \
            any(c.step > last.from_step and c.step in trial.epochs for c in trial.checkpoints):
        return None
    donors = [t for t in state.finished + state.running if t.number == last.parent_trial]
    kept = [c for t in donors for c in t.checkpoints if c.step == last.parent_step]
    return (last.parent_trial, kept[0]) if kept else None  # type: ignore[return-value]


def restore_of(checkpoints: Sequence[Checkpoint]) -> dict[str, Any] | None:
    """A task's ``restore``: the newest of a trial's kept ``checkpoints`` (newest first)
    with the older ones in ``older``; None for none (the trial starts from scratch)."""
    if not checkpoints:
        return None
    newest, *older = checkpoints
    return {**_checkpoint_dict(newest), "older": [_checkpoint_dict(c) for c in older]}


def _reached(checkpoints: Sequence[Checkpoint] | None, step: int | None) -> bool:
    """True when a trial's kept ``checkpoints`` (newest first) include ``step``'s or a
    later one (any one, for ``step`` None): an exploit of that step need wait no more."""
    return bool(checkpoints) and \
        (step is None or checkpoints[0].step >= step)  # type: ignore[index]


def _from_step(checkpoints: Sequence[Checkpoint], step: int | None) -> list[Checkpoint]:
    """A donor's kept ``checkpoints`` (newest first) an exploit of ``step`` restores:
    ``step``'s with the older ones as fallbacks; all of them for ``step`` None or when
    none is that old (the newest is the nearest kept)."""
    upto = [c for c in checkpoints if step is None or c.step <= step]
    return upto if upto and (step is None or upto[0].step == step) else list(checkpoints)


def _checkpoint_dict(checkpoint: Checkpoint) -> dict[str, Any]:
    return {"step": checkpoint.step, "path": checkpoint.path, "nbytes": checkpoint.nbytes,
            "checksum": checkpoint.checksum}


@dataclass(frozen=True)
class FinishedTrial:
    """A finished trial: the record to commit, and whether a prune order was sent that
    the worker never took (the master removes it from the tuple space)."""

    record: ResultRecord
    stale_prune: bool   # an order (prune or pause) is left on its prune tag
    warning: str | None = None   # for the log: why it ended as it did


@dataclass(frozen=True)
class Stats:
    """A snapshot for the progress display."""

    done: int
    total: int | None
    running: int
    failed: int
    pruned: int
    best: float | None
    best_trial: int | None
    elapsed: float
    queued: int = 0
    front: int | None = None   # several objectives: trials on the Pareto front (no best)
    untaken: float = 0.0       # seconds tasks have waited untaken with a worker free


class SearchEngine:
    """Bookkeeping of one study's search; not thread safe (the master loop owns it).

    ``sampler`` (default: the strategy's, from :func:`make_sampler`) is restored here
    from ``state``: every stored trial, finished or left running, in number order."""

    def __init__(self, settings: SearchSettings, state: StudyState, seed: int,
                 clock: Callable[[], float] = time.monotonic,
                 sampler: Sampler | None = None, workers: int | None = None) -> None:
        self.settings = settings
        self.clock = clock
        self.started = clock()
        self.running: dict[int, _Running] = {}
        self.stop_reason: str | None = None
        self.cut_short = False  # a threshold or the time budget ended the search early
        self.counts = {"ok": 0, "failed": 0, "pruned": 0}
        self.paused: set[int] = set()   # trials that ended paused in this run
        self.halted = False   # a wall-time stop (:meth:`halt`) ended the search
        self.best: tuple[float, int] | None = None   # one objective: its best ok trial
        objectives = settings.objectives
        self.front: ParetoFront[int] | None = \
            ParetoFront(objectives.directions) if objectives.several else None
        unfinished = sorted(state.running, key=lambda t: (t.status != "paused", t.number))
        self._dispatched: set[int] = set()   # every trial dispatched in this run
        # each trial's latest durable checkpoints, newest first (at most checkpoints.keep)
        self._checkpoints = {t.number: list(t.checkpoints) for t in unfinished}
        self._waiting: dict[int, _Waiting] = {}   # paused by the scheduler, by number
        self._next_number = state.next_number
        self._untaken_since: float | None = None   # tasks wait, a worker is free, since
        self._untold: list[tuple[int, dict[str, Any], tuple[float, ...] | None, str]] = []
        self.sampler = sampler or make_sampler(settings, seed, workers)
        #: The search's scheduler: its ``pruner:``, or its strategy's own (pbt's).
        self.scheduler = settings.pruner or self.sampler.scheduler()
        self._exploits: deque[_Running] = deque()   # exploited members to dispatch at once
        self._awaiting: dict[int, list[_Running]] = {}   # donor -> members awaiting its checkpoint
        self._held: dict[int, int] = {}   # trial -> epoch of its report whose answer is held
        #: lines for the log: exploits carried out otherwise (:meth:`take_notes`)
        self.notes: list[str] = []
        for trial in sorted(state.finished, key=lambda t: t.number):
            self._replay(trial)
        for trial in unfinished:
            self._replay_progress(trial)
        if self.scheduler is not None:
            self.scheduler.answers()   # to replayed reports: carried out already
        # after the replay: a scheduler fed by its sampler (pbt's) ends with the trials'
        # current parameters, whatever its replayed answers drew
        self.sampler.restore([observation(t, len(objectives)) for t in sorted(
            state.finished + state.running, key=lambda t: t.number)])
        self._total = self._planned_total()
        held = self.scheduler.waiting() if self.scheduler is not None else ()
        for trial in unfinished:
            if trial.number in held and trial.checkpoints:
                self._waiting[trial.number] = _Waiting(*self._stored_run(trial))
        unfinished = [t for t in unfinished if t.number not in self._waiting]
        self._recovery = {t.number for t in unfinished}  # paused or left running
        #: member -> (donor, its checkpoint) a trial killed before it checkpointed after
        #: its exploit goes on from
        self.donor_restores = {t.number: found for t in unfinished
                               if (found := _exploited_from(t, state)) is not None}
        for number in self.donor_restores:   # its own kept are of the lineage it left
            self._checkpoints[number] = []
        self._requeue = deque(TrialStart(t.number, t.params, t.param_key,
                                         self.donor_restores[t.number][1].step
                                         if t.number in self.donor_restores else
                                         t.checkpoints[0].step if t.checkpoints else None)
                              for t in unfinished)
        self._resumed = {t.number: t for t in unfinished}   # until dispatched again

    def _planned_total(self) -> int | None:
        """How many trials the study will have when done (None if unknown): the
        strategy's size (a grid's points), at most ``max_trials``."""
        limit = self.settings.max_trials
        size = self.sampler.size(self.settings.space)
        if size is None:
            return limit
        return min(size, limit) if limit else size

    def _replay(self, trial: StoredTrial) -> None:
        """Count a trial finished in an earlier run (it is not run again)."""
        self.counts[trial.status] += 1
        scheduler = self.scheduler
        if scheduler is not None:   # shown what it saw live; its answers no longer matter
            for epoch, metrics in sorted(trial.epochs.items()):
                score = self._prune_score(metrics)
                if score is not None:
                    scheduler.decide(trial.number, epoch, score)
            scheduler.finish(trial.number, trial.status == "ok")
        if trial.status == "ok" and all(value is not None for value in trial.scores):
            self._consider(trial.number, trial.scores, trial.values)  # type: ignore[arg-type]

    def _replay_progress(self, trial: StoredTrial) -> None:
        """Show the scheduler the epochs of a trial to resume, up to the step of its
        checkpoint (the attempt goes on from there; none when it starts from scratch)."""
        scheduler = self.scheduler
        step = trial.checkpoints[0].step if trial.checkpoints else None
        if scheduler is None or step is None:
            return
        for epoch, metrics in sorted(trial.epochs.items()):
            score = self._prune_score(metrics) if epoch <= step else None
            if score is not None:
                scheduler.decide(trial.number, epoch, score)

    def _stored_run(self, trial: StoredTrial) -> tuple[_Running, dict[str, Any]]:
        """A stored paused trial as if it had just paused in this run: its run (with its
        metrics at its latest checkpoint) and its result (those metrics)."""
        step = trial.checkpoints[0].step
        metrics = dict(trial.epochs.get(step, {}))
        run = _Running(TrialStart(trial.number, trial.params, trial.param_key),
                       paused_at_rung=True, last_metrics=metrics)
        return run, {"trial": trial.number, "status": "paused", "epoch": step,
                     "metrics": metrics}

    @property
    def recovering(self) -> bool:
        """True while a trial re-queued after a crash (one of ``state.running``) has not
        finished: the master then dispatches no more tasks than it has workers, so that a
        trial queued but never started is not charged an attempt if the job dies again."""
        return bool(self._recovery)

    @property
    def finished(self) -> int:
        return sum(self.counts.values())

    @property
    def unfinished(self) -> list[int]:
        """Numbers of the trials not finished: dispatched and not reported, or left
        running by an earlier master and not dispatched yet."""
        return sorted(set(self.running) | self._recovery)

    @property
    def waiting(self) -> list[int]:
        """Numbers of the trials paused by their scheduler, waiting to be promoted."""
        return sorted(self._waiting)

    def next_trial(self) -> TrialStart | None:
        """The next trial to dispatch, or None when the search may start no more: a
        paused trial its scheduler promotes now, else a new one."""
        if self._exploits and (self.halted or self.cut_short):   # they stay paused
            self.paused |= {run.start.number for run in self._exploits}
            self._exploits.clear()
        if self._exploits:   # a member going on: not a new trial
            running = self._go_on(self._exploits.popleft())
            self.running[running.start.number] = running
            self._dispatched.add(running.start.number)
            return running.start
        if self.stop_reason is None:
            self.check_time()
        if not self.halted and not self.cut_short:
            promoted = self._promoted()
            if promoted is not None:
                return promoted
        limit = self.settings.max_trials
        if self.stop_reason is None and limit is not None and \
                self.finished + len(self.running) + len(self._waiting) >= limit:
            self.stop_reason = f"max_trials ({limit}) reached"
        if self.stop_reason is not None:
            return None
        start = self._requeue.popleft() if self._requeue else self._propose()
        if start is None:
            self.stop_reason = f"{self.settings.strategy} exhausted"
            return None
        resumed = self._resumed.pop(start.number, None)
        running = _Running(start)
        if resumed is not None and start.resumed_from is not None:
            running.restore = restore_of(resumed.checkpoints)
            running.last_metrics = dict(resumed.epochs.get(start.resumed_from, {}))
            if start.number in self.donor_restores:
                donor, checkpoint = self.donor_restores[start.number]
                running.restore = {**restore_of([checkpoint]),  # type: ignore[dict-item]
                                   "trial": donor}
        self.running[start.number] = running
        self._dispatched.add(start.number)
        return start

    def _promoted(self) -> TrialStart | None:
        """A waiting trial to dispatch again from its latest checkpoint: one its
        scheduler no longer holds paused (it reached a later rung before its pause took
        effect, or was promoted before its run ended), else the one
        :meth:`~diel.search.schedulers.Scheduler.promote` names."""
        scheduler = self.scheduler
        if not self._waiting or scheduler is None:
            return None
        held = scheduler.waiting()
        number = next((n for n in sorted(self._waiting) if n not in held), None)
        while number is None:
            number = scheduler.promote()
            if number is None:
                return None
            if number not in self._waiting:   # its pause has not ended its run yet: it
                number = None                 # is dispatched again once it has (above)
        waiting = self._waiting.pop(number)
        checkpoints = self._checkpoints[number]
        old = waiting.run.start
        start = TrialStart(number, old.params, old.param_key, checkpoints[0].step)
        running = _Running(start, last_metrics=dict(waiting.run.last_metrics),
                           restore=restore_of(checkpoints), promoted_from=waiting)
        self.running[number] = running
        self._dispatched.add(number)
        return start

    def unpromotable(self) -> list[FinishedTrial]:
        """When nothing runs and no trial will start or be promoted any more (the search
        is ending): the trials still waiting, ended ``pruned`` with their last metrics
        (they stopped at their rung, as stop mode would have stopped them); none while a
        wall-time stop keeps them paused for the next run."""
        if self.running or self.halted or not self._waiting or \
                (self.stop_reason is None and not self.cut_short):
            return []
        ended = []
        for number in sorted(self._waiting):
            waiting = self._waiting.pop(number)
            finished = self._ended(waiting.run, {**waiting.result, "status": "pruned"})
            ended.append(FinishedTrial(finished.record, False))
        return ended

    def task(self, number: int) -> dict[str, Any]:
        """The task of dispatched trial ``number``: its ``trial``, ``params``,
        ``restore`` (:func:`restore_of`, and for an exploit the donor's number,
        ``trial``, whose copy in the tuple space to read; None: from scratch),
        ``decides`` (its scheduler's decision points, where its reports wait for an
        answer; None: none) and ``checkpoint_every`` (the epochs between the checkpoints
        its scheduler needs, each kept in the tuple space too; None: none)."""
        running = self.running[number]
        scheduler = self.scheduler
        return {"trial": number, "params": running.start.params, "restore": running.restore,
                "decides": None if scheduler is None else
                scheduler.decision_points(number).as_task(),
                "checkpoint_every": None if scheduler is None else scheduler.checkpoint_every()}

    def waits_at(self, number: Any, epoch: Any) -> bool:
        """True when trial ``number``'s report of ``epoch`` waits for the master's answer
        (one of its scheduler's decision points)."""
        scheduler = self.scheduler
        return scheduler is not None and type(number) is int and type(epoch) is int and \
            scheduler.decision_points(number).includes(epoch)

    def halt(self, reason: str) -> None:
        """A wall-time stop: start no more trials (``reason`` says why); the running
        ones are to be ordered to pause (:meth:`pause_orders`)."""
        if not self.halted:
            self.halted = True
            self.stop_reason = reason
            self.paused |= set(self._waiting)   # they wait again in the next run
            self.paused |= {run.start.number for run in self._exploits}   # as they were
            self.paused |= {run.start.number for runs in self._awaiting.values() for run in runs}
            self._exploits.clear()
            self._awaiting.clear()

    def pause_orders(self) -> list[int]:
        """After :meth:`halt`: the running trials to order to pause now (each once;
        not those already ordered to stop)."""
        if not self.halted:
            return []
        due = [n for n, trial in sorted(self.running.items())
               if not trial.pause_sent and not trial.prune_sent]
        for number in due:
            self.running[number].pause_sent = True
        return due

    def on_checkpoint(self, msg: Mapping[str, Any]) -> Checkpoint | None:
        """A checkpoint report: the durable checkpoint to record, or None for a trial
        not dispatched in this run or a report without a step (an int >= 0), a path
        (text), a size (an int >= 0) and a checksum (text)."""
        number, step, path = msg.get("trial"), msg.get("step"), msg.get("path")
        nbytes, checksum = msg.get("nbytes"), msg.get("checksum")
        if number not in self._dispatched or not is_whole(step) or step < 0 or \
                not isinstance(path, str) or not 0 < len(path) <= PATH_CHARS or \
                not is_whole(nbytes) or nbytes < 0 or \
                not isinstance(checksum, str) or len(checksum) > CHECKSUM_CHARS:
            return None
        return Checkpoint(number, step, path, nbytes, checksum)  # type: ignore[arg-type]

    def checkpointed(self, checkpoint: Checkpoint) -> None:
        """A checkpoint the master recorded (:meth:`on_checkpoint`, in its folder): kept
        as the trial's latest, with at most ``checkpoints.keep`` older ones, so that a
        promoted trial resumes from it (and falls back on the older ones)."""
        kept = [c for c in self._checkpoints.get(checkpoint.number, [])
                if c.step != checkpoint.step]
        kept = sorted([checkpoint, *kept], key=lambda c: c.step, reverse=True)
        self._checkpoints[checkpoint.number] = kept[:self.settings.checkpoints.keep]
        awaiting = self._awaiting.pop(checkpoint.number, [])
        for member in awaiting:   # those whose donor's checkpoint is here go on
            if _reached(kept, member.exploit.step):  # type: ignore[union-attr]
                self._exploits.append(member)
            else:
                self._awaiting.setdefault(checkpoint.number, []).append(member)

    def _propose(self) -> TrialStart | None:
        """A new trial from the sampler, told every result it has not been told yet
        first, in trial-number order (so that in batch mode it sees the same history in
        the same order on every run); None when it has nothing left to propose."""
        for told in sorted(self._untold, key=lambda told: told[0]):
            self.sampler.tell(*told)
        self._untold = []
        params = self.sampler.propose(self._next_number)
        if params is None:
            return None
        self._next_number += 1
        return TrialStart(self._next_number - 1, params, param_key(params))

    def check_time(self) -> None:
        """Stop starting trials once the time budget is spent."""
        budget = self.settings.time_budget
        if self.stop_reason is None and budget is not None and \
                self.clock() - self.started >= budget:
            self.stop_reason = f"time budget ({budget:g} s) spent"
            self.cut_short = True

    def withdraw(self, number: int) -> None:
        """Forget a dispatched trial that no worker took (the master took its task back);
        a promoted one waits again (its checkpoint is where it was)."""
        run = self.running.pop(number, None)
        if run is not None and run.promoted_from is not None:
            self._waiting[number] = run.promoted_from
        self._recovery.discard(number)

    @property
    def done(self) -> bool:
        """True when nothing runs, nothing waits to be promoted (or a wall-time stop
        keeps the waiting trials paused) and nothing more will be started."""
        return self.stop_reason is not None and not self.running and \
            not self._exploits and not self._awaiting and (self.halted or not self._waiting)

    def queued(self, numbers: Iterable[int], at: datetime) -> None:
        """The tasks of trials ``numbers`` go in the queue now, ``at`` (after their rows
        were committed): no start can precede it."""
        for number in numbers:
            self.running[number].queued_at = at

    def on_start(self, msg: Mapping[str, Any]) -> StartedRecord | None:
        """A start report (a worker took the task): the record to commit (None for a
        trial not dispatched or already started). ``at``, the worker's clock, is used
        when it is a plausible time, else the master's; never before the trial was
        queued (a worker whose clock is behind the master's)."""
        trial = self.running.get(msg.get("trial"))  # type: ignore[arg-type]
        if trial is None or trial.started_at is not None:
            return None
        at = _moment(msg.get("at"))
        trial.started_at = at if trial.queued_at is None else max(at, trial.queued_at)
        self._untaken_since = None
        worker = msg.get("worker")
        return StartedRecord(trial.start.number, worker if is_whole(worker) else None,
                             trial.started_at)

    def untaken_for(self, workers: int) -> float:
        """Seconds since a worker last took a task, counted only while tasks wait and
        fewer trials run than there are ``workers`` (0 otherwise): tasks that nobody
        takes although a worker should be free to."""
        queued = sum(trial.started_at is None for trial in self.running.values())
        if not queued or len(self.running) - queued >= workers:
            self._untaken_since = None
            return 0.0
        now = self.clock()
        if self._untaken_since is None:
            self._untaken_since = now
        return now - self._untaken_since

    def on_epoch(self, msg: Mapping[str, Any]) -> tuple[EpochRecord | None, Any]:
        """An epoch report: the record to commit (None for an unknown trial) and the
        order to put on the trial's prune tag: :data:`~diel.search.protocol.STOP` (its
        scheduler answered stop), :data:`~diel.search.protocol.PAUSE` (it answered
        pause), an :func:`~diel.search.protocol.exploit_order` (it answered exploit),
        :func:`~diel.search.protocol.hold` (it holds the answer: :meth:`released` gives it
        later) or None (no order; at most one order a trial's run)."""
        trial = self.running.get(msg.get("trial"))  # type: ignore[arg-type]
        epoch, metrics = msg.get("epoch"), msg.get("metrics")
        if trial is None or not isinstance(epoch, int) or not isinstance(metrics, Mapping):
            return None, None
        trial.last_metrics = bounded_metrics(metrics)
        worker = msg.get("worker")
        record = EpochRecord(trial.start.number, epoch, dict(trial.last_metrics),
                             worker if is_whole(worker) else None)
        scheduler = self.scheduler
        resumed_from = trial.start.resumed_from
        if scheduler is None or (resumed_from is not None and epoch <= resumed_from):
            return record, None   # a resumed trial's scheduler saw that epoch already
        score = self._prune_score({"epoch": epoch, **metrics})
        if score is None:
            return record, None
        # Asked even after an order (answer ignored): a resumed study replays every
        # stored epoch, so the scheduler must have seen the same ones live.
        decision = scheduler.decide(trial.start.number, epoch, score)
        if not isinstance(decision, Decision) or decision.action not in CARRIED_OUT or \
                decision.action not in scheduler.actions:
            raise TypeError(f"scheduler {type(scheduler).__name__} answered {decision!r}; "
                            f"diel carries out the actions it declares among continue, "
                            f"stop, pause and exploit")
        if trial.prune_sent or trial.pause_sent:
            return record, None
        if scheduler.holds(trial.start.number, epoch) and not (self.halted or self.cut_short):
            self._held[trial.start.number] = epoch
            return record, hold(epoch)
        return record, self._order(trial, decision)

    def _order(self, trial: _Running, decision: Decision) -> Any:
        """The order carrying out ``decision`` for running ``trial`` (None: continue)."""
        if decision.action is Action.CONTINUE:
            return None
        if decision.action is Action.STOP:
            trial.prune_sent = True
            return STOP
        if decision.action is Action.EXPLOIT:
            trial.pause_sent, trial.exploit = True, decision
            donor = self._checkpoints.get(decision.donor)  # type: ignore[arg-type]
            step = decision.step if decision.step is not None else \
                donor[0].step if donor else None
            return exploit_order(decision.donor, step,  # type: ignore[arg-type]
                                 decision.params)  # type: ignore[arg-type]
        trial.pause_sent = trial.paused_at_rung = True
        return PAUSE

    def released(self, every: bool = False) -> list[tuple[int, Any]]:
        """The held answers due now, ``(trial, order)`` for its prune tag: those its
        scheduler decided (:meth:`Scheduler.answers`: an order, or
        :func:`~diel.search.protocol.go_on`), and, once the search stops or is cut short
        (or ``every``: an interrupt), every other held one (go on: the stop's pause order,
        if any, is taken first)."""
        due: list[tuple[int, Any]] = []
        answers = self.scheduler.answers() if self.scheduler is not None else []
        for number, epoch, decision in answers:
            trial = self.running.get(number)
            if trial is None or self._held.get(number) != epoch:
                continue   # it ended, or its report was a replay's
            del self._held[number]
            order = None if trial.prune_sent or trial.pause_sent else self._order(trial, decision)
            due.append((number, go_on(epoch) if order is None else order))
        if self.halted or self.cut_short or every:
            due += [(number, go_on(epoch)) for number, epoch in self._held.items()]
            self._held.clear()
        return due

    def _prune_score(self, metrics: Mapping[str, Any]) -> float | None:
        expression = self.settings.prune_metric
        value = expression.evaluate(metrics) if expression is not None else None
        if value is None or not math.isfinite(value):
            return None
        return value if self.settings.prune_direction == "maximize" else -value

    def on_result(self, msg: Mapping[str, Any]) -> FinishedTrial | None:
        """A result report: the outcome to commit, or None for a trial not running."""
        trial = self.running.pop(msg.get("trial"), None)  # type: ignore[arg-type]
        if trial is None:
            return None
        self._recovery.discard(trial.start.number)
        self._held.pop(trial.start.number, None)
        if msg.get("status") == "paused" and trial.exploit is not None and not self.halted:
            return self._exploited(trial, msg)
        if msg.get("status") == "paused" and trial.paused_at_rung and not self.halted:
            if self._checkpoints.get(trial.start.number):
                self._waiting[trial.start.number] = _Waiting(trial, dict(msg))
            else:
                ended = self._ended(trial, {**msg, "status": "pruned"})
                return FinishedTrial(ended.record, False, (
                    f"trial {trial.start.number} was paused at a rung but made no "
                    "checkpoint, so it cannot be promoted without training again: recorded "
                    "pruned (mode: promotion needs a function that checkpoints each epoch)"))
        return self._ended(trial, msg)

    def take_notes(self) -> list[str]:
        """The lines for the log since the last call."""
        notes, self.notes = self.notes, []
        return notes

    def _exploited(self, trial: _Running, msg: Mapping[str, Any]) -> FinishedTrial:
        """The run of a trial ordered to exploit ended (paused, its own state
        checkpointed): its end to commit; the trial goes on (:meth:`_go_on`) at once,
        or, while its donor runs (or is about to) with no durable checkpoint recorded
        yet (the one of the interval it was ranked at is still being written, or it
        exploited another and starts a new lineage), once it has one."""
        number, decision = trial.start.number, trial.exploit
        assert decision is not None and decision.donor is not None
        record = ResultRecord(
            number, "paused", None, _float_or_none(msg.get("time")),
            _float_or_none(msg.get("accuracy")), _float_or_none(msg.get("loss")),
            bounded_metrics(msg.get("metrics")),
            msg.get("worker") if is_whole(msg.get("worker")) else None,
            msg.get("epoch") if isinstance(msg.get("epoch"), int) else None,
            started_at=trial.started_at)
        coming = decision.donor in self.running or \
            any(run.start.number == decision.donor for run in self._exploits)
        if coming and not _reached(self._checkpoints.get(decision.donor), decision.step):
            self._awaiting.setdefault(decision.donor, []).append(trial)
            return FinishedTrial(record, True)
        self._exploits.append(trial)
        return FinishedTrial(record, True)

    def _go_on(self, trial: _Running) -> _Running:
        """Exploiting ``trial``'s next run, as it is dispatched (:meth:`next_trial`):
        with the exploit's parameters from its donor's checkpoint of the decision's step
        (:func:`_from_step`: the newest kept when that one is gone), its task reading the
        donor's copy in the tuple space (``restore``'s ``trial``); its own checkpoints
        are superseded. A donor whose checkpoint is gone (it ended without one kept):
        the trial goes on from its own latest checkpoint with the parameters its
        scheduler resamples (:meth:`~diel.search.schedulers.Scheduler.donor_gone`),
        recorded as its own parent, and :attr:`notes` says so."""
        number, decision = trial.start.number, trial.exploit
        assert decision is not None and decision.donor is not None
        donor = _from_step(self._checkpoints.get(decision.donor, []), decision.step)
        own = self._checkpoints.get(number)
        if donor:
            params = dict(decision.params or {})
            step: int | None = donor[0].step
            start = TrialStart(number, params, param_key(params), step, decision.donor, step)
            restore = {**restore_of(donor), "trial": decision.donor}  # type: ignore[dict-item]
            self._checkpoints[number] = []
        else:
            resampled = self.scheduler.donor_gone(number) if self.scheduler else None
            params = dict(resampled if resampled is not None else trial.start.params)
            step = own[0].step if own else None
            start = TrialStart(number, params, param_key(params), step, number, step)
            restore = restore_of(own or [])
            self.notes.append(f"trial {number}: the checkpoint of donor trial "
                              f"{decision.donor} is gone; its parameters are resampled and "
                              f"it goes on from {f'its own step {step}' if own else 'scratch'}")
        return _Running(start, last_metrics=dict(trial.last_metrics), restore=restore)

    def _ended(self, trial: _Running, msg: Mapping[str, Any]) -> FinishedTrial:
        """The outcome of ``trial``'s run ended by result ``msg``."""
        number = trial.start.number
        metrics = bounded_metrics(msg.get("metrics"))
        values = {**trial.last_metrics, **metrics}
        values.update({k: msg[k] for k in ("accuracy", "loss", "time", "epoch")
                       if msg.get(k) is not None})
        worker = msg.get("worker") if is_whole(msg.get("worker")) else None
        epoch = msg.get("epoch") if isinstance(msg.get("epoch"), int) else None
        if msg.get("status") == "paused":   # not finished: it resumes when promoted,
            if number not in self._waiting:   # or in the next run
                self.paused.add(number)
            return FinishedTrial(ResultRecord(
                number, "paused", None, _float_or_none(msg.get("time")),
                _float_or_none(msg.get("accuracy")), _float_or_none(msg.get("loss")), metrics,
                worker, epoch, started_at=trial.started_at), False)
        status = msg.get("status") if msg.get("status") in ("ok", "failed", "pruned") \
            else "failed"
        error = msg.get("error") if status == "failed" else None
        if status == "failed" and not error:
            error = f"worker reported status {_clipped_repr(msg.get('status'))} without an " \
                    "error text"
        error = clip(error if isinstance(error, str) else repr(error), ERROR_CHARS) \
            if error is not None else None
        objectives = self.settings.objectives
        scores: tuple[float | None, ...] = ()
        if status != "failed":
            scores, error = _scores(objectives, msg.get("value"), values)
            status = "failed" if error else status
        if status == "ok":
            status, error = _check_ok(values, scores, objectives)
        if status == "failed":
            scores = ()
        self.counts[status] += 1
        self._checkpoints.pop(number, None)   # finished: it resumes no more
        # members awaiting its first checkpoint go on from their own (a line each)
        self._exploits += self._awaiting.pop(number, [])   # to go on from their own
        finite = tuple(_finite(value) for value in scores)
        complete = bool(finite) and all(value is not None for value in finite)
        self._untold.append((number, trial.start.params,
                             finite if complete else None, status))  # type: ignore[arg-type]
        if self.scheduler is not None:
            self.scheduler.finish(number, status == "ok")
        if status == "ok":
            self._consider(number, finite, values)  # type: ignore[arg-type]
        record = ResultRecord(
            number, status, finite[0] if finite else None, _float_or_none(msg.get("time")),
            _float_or_none(msg.get("accuracy")), _float_or_none(msg.get("loss")), metrics,
            worker, epoch, error,
            objective_values=finite if objectives.several and finite else None,
            started_at=trial.started_at)
        return FinishedTrial(record, (trial.prune_sent and status != "pruned") or
                             trial.pause_sent)

    def _consider(self, number: int, scores: tuple[float, ...],
                  values: Mapping[str, Any]) -> None:
        """Track the best ok trial (one objective) or the Pareto front (several), and
        apply the stop threshold."""
        if self.front is not None:
            self.front.add(number, scores)
            named: dict[str, float] = {}
        else:
            if self.best is None or self.settings.objective.better(scores[0], self.best[0]):
                self.best = (scores[0], number)
            named = {"objective": scores[0]}
        threshold = self.settings.stop_when
        if threshold is not None and self.stop_reason is None and \
                threshold.met({**values, **named}):
            self.stop_reason = f"stop_when ({threshold.text}) met by trial {number}"
            self.cut_short = True

    def stats(self, workers: int | None = None) -> Stats:
        """Counts for the progress display: running trials are those a worker took (its
        start report), queued ones were dispatched and not taken yet; with ``workers``,
        also how long tasks have waited untaken with a worker free
        (:meth:`untaken_for`)."""
        best = self.best or (None, None)
        running = sum(trial.started_at is not None for trial in self.running.values())
        return Stats(self.finished, self._total, running, self.counts["failed"],
                     self.counts["pruned"], best[0], best[1], self.clock() - self.started,
                     len(self.running) - running,
                     len(self.front) if self.front is not None else None,
                     self.untaken_for(workers) if workers is not None else 0.0)


def bounded_metrics(metrics: Any) -> dict[str, Any]:
    """A report's metrics as the master keeps them: a mapping (anything else: none),
    each string in it, at any depth, clipped to METRIC_TEXT_CHARS."""
    if not isinstance(metrics, Mapping):
        return {}
    if all(type(value) in _NUMBERS for value in metrics.values()):   # the usual case
        return dict(metrics)
    return {key: _bounded(value) for key, value in metrics.items()}


def _bounded(value: Any) -> Any:
    if isinstance(value, str):
        return clip(value, METRIC_TEXT_CHARS)
    if isinstance(value, Mapping):
        return {key: _bounded(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_bounded(item) for item in value]
    return value


def _clipped_repr(value: Any) -> str:
    return clip(repr(value), METRIC_TEXT_CHARS)


def _moment(seconds: Any) -> datetime:
    """The UTC time ``seconds`` after the epoch (a worker's clock); now when it is not
    a finite number a datetime can hold."""
    if _float_or_none(seconds) is not None:
        try:
            return datetime.fromtimestamp(seconds, timezone.utc)
        except (OverflowError, OSError, ValueError):
            pass
    return datetime.now(timezone.utc)


def _float_or_none(value: Any) -> float | None:
    """``value`` as a float when it is an int or a float (not a bool), else None."""
    return float(value) if is_number(value) else None


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _scores(objectives: Objectives, value: Any,
            values: Mapping[str, Any]) -> tuple[tuple[float | None, ...], str | None]:
    """Each objective's value for a result with metrics ``values``; a function that
    returned one number (``value``) gave the value of the one objective itself, which
    cannot stand for several (then the error text)."""
    number = _float_or_none(value)
    if number is None:
        return objectives.values(values), None
    if objectives.several:
        return (), (f"the trial returned one number ({number:g}) but the search has "
                    f"{len(objectives)} objectives; return a mapping of the metrics they use")
    return (number,), None


def _check_ok(values: Mapping[str, Any], scores: tuple[float | None, ...],
              objectives: Objectives) -> tuple[str, str | None]:
    """An ``ok`` result stays ok only with finite metrics and every objective computable;
    a diverged trial (nan/inf loss or accuracy or objective) is recorded failed."""
    for name in _DIVERGENCE_METRICS:
        value = _float_or_none(values.get(name))
        if value is not None and not math.isfinite(value):
            return "failed", f"diverged: {name} is {value}"
    for objective, score in zip(objectives, scores):
        if score is None:
            return "failed", f"the result lacks a metric the objective {objective.text!r} needs"
        if not math.isfinite(score):
            return "failed", f"diverged: objective {objective.text!r} is {score}"
    return "ok", None
