"""The ``search`` module: the master of a hyperparameter search (builtin name ``search``).

It draws trials from the space (:mod:`diel.search.engine` decides), puts them as tasks
in the tuple space, takes the workers' epoch and result reports, orders prunes, records
everything in the results database and prints progress and the best trials (with
several objectives, the Pareto front).

One pass of the loop: commit, in one transaction, the reports taken in the last pass
and the trials about to start (as ``running``); put those trials' tasks; wait up to
``poll`` seconds for a report and take every other report already there. So a result
(or a checkpoint) taken from the space is committed before the master dispatches or
waits again, and a trial is in the database before its task exists (see
docs/search.md). A pass that took only reports that a rerun of their trial after a crash
sends again (the start, epoch and suggest reports of running trials) commits nothing:
they go with the next commit, at most DEFER_S seconds later. A trial is
queued (``queued_at``) until its worker's ``start`` report, then running
(``started_at``, the worker's clock).

Tasks nobody takes: while tasks wait and a worker should be free to take one, the
master counts the time since a worker last took one; after UNTAKEN_NOTE_S it says so, on
the progress line and in a warning naming the tag and the worker module.

A worker that cannot serve (its trial function does not load) puts a ``fatal`` report:
the master takes back every task no worker took (those trials were never run: their rows
go) and the dispatches of the trials still running (not charged: they run again first on
resume), gives the lease back and ends the job with one line, a :class:`ConfigError` at
the worker's setting (exit status 2).

Workers are not trusted: whatever they report is clipped before it is stored or logged
(:mod:`diel.limits`). A database whose disk is full raises
:class:`~diel.errors.DatabaseUnwritable` from the store; the job ends with its one line.

No crash loops: every trial row counts its attempts (times dispatched). When a study is
resumed, a trial left ``running`` that was dispatched ``max_attempts`` times (a setting
of the worker module, default 2) is recorded ``failed`` instead of being run again; and
until the trials re-queued after a crash have finished, no task is queued ahead of the
workers (:meth:`_Loop.capacity`), so trials that never started are not charged.

One run a study: the master holds the study's lease (diel.results.Storage) from before
it opens the study until it ends, moving its heartbeat on every few seconds from the
loop. Resuming checks what changed (diel.search.engine.check_resumable, rescored).
Interrupts (SIGINT, SIGTERM) are held back (diel.executive.interrupts.deferred) and noticed
between two passes, or at once while the master waits on the tuple space (whose server
rank is interrupted too): the master dispatches nothing more, commits what it has, gives
the lease back, says in one line how many trials will run again, and raises Interrupted.
No database write is cut in half.

Checkpoints: a worker's ``checkpoint`` report (a file is durable) is committed in the
same transaction as the other reports of its pass, for any trial dispatched in this run,
also after its result; a report whose file is not its trial's in the study's checkpoint
folder is refused with a warning (so the master never deletes a file of anyone else's).
Then the master deletes what the checkpoint settings do not keep
(:mod:`diel.search.retention`); at the start of a run, also the temporary files a crash
left. A trial dispatched again carries its ``restore`` in its task (see
diel.search.engine).

Define-by-run (:mod:`diel.search.suggest`): the master puts the declared space on
:func:`~diel.search.protocol.declared_tag` before any task, and answers each
``suggest`` report at once on the trial's suggestion tag; the value is committed
(a ``Suggested`` row) with the pass's other reports.

A scheduler's pause (``mode: promotion``) is ordered as a wall-time stop's is,
:data:`~diel.search.protocol.PAUSE` on the trial's prune tag; the trial is dispatched
again from its checkpoint when its scheduler promotes it, and the paused trials never
promoted are committed ``pruned`` when the search ends. A scheduler's exploit
(``strategy: pbt``) is an :func:`~diel.search.protocol.exploit_order` there: the member
ends its run paused, and is dispatched again in the same pass from its donor's
checkpoint, which the checkpoint keeping holds until the member has read it
(:meth:`~diel.search.retention.Retention.hold`); a pass whose reports hold a paused end
commits them before its dispatches, so that the end never overwrites the new start.

Wall-time stops (``diel run --stop-after``, SIGUSR1: :mod:`diel.executive.walltime`):
the master starts no more trials, takes back the tasks no worker took, orders every
running trial to pause (:data:`~diel.search.protocol.PAUSE` on its prune tag) and waits
up to ``stop_grace`` seconds for their results (``paused``: their progress is in their
last durable checkpoint; a trial that never checkpointed starts again from scratch) and
their checkpoint reports. A trial still running then is taken back uncharged (it runs
again first, from its last kept checkpoint). The master gives the lease back, stops the
workers and raises :class:`~diel.executive.walltime.Stopped`, whose one line says how
many trials paused, with and without a checkpoint; ``diel run`` exits with
:data:`~diel.executive.walltime.STOPPED_STATUS` and the same command resumes.

The master depends on the :class:`~diel.results.Storage` interface only: :func:`main`
opens the store its ``database`` setting names with :func:`diel.results.get_storage`
(SQL, or ``memory://``), and the final report ranks the trials the store gives back
(:meth:`~diel.results.Storage.trials`), so a search runs end to end on any storage.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import secrets
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence, TextIO

from diel.checks import whole_number
from diel.errors import ConfigError, DatabaseUnwritable, ResultsError, StudyBusy
from diel.checkpoints import layout
from diel.executive.interrupts import Deferral, Interrupted, deferred
from diel.executive.walltime import Stopped, WallTime
from diel.limits import LOG_TEXT_CHARS, clip
from diel.results import HEARTBEAT_S, Checkpoint, EpochRecord, Lease, ResultRecord, Segment, \
    StartedRecord, Storage, StoredTrial, StudyState, Suggested, TrialStart, \
    get_storage, pareto_trials
from diel.search.engine import SearchEngine, Stats, check_resumable, rescored
from diel.search.progress import UNTAKEN_NOTE_S, ProgressDisplay
from diel.search.report import more_line, trial_table
from diel.search.terminal import DEFAULT_WIDTH, terminal_of
from diel.search.protocol import DEFAULT_WORKERS, PAUSE, checkpoint_dir, database_url, \
    declared_tag, go_on, is_report, prune_tag, report_tag, study_of_search, \
    suggestion_tag, task_tag
from diel.search.retention import Retention
from diel.search.suggest import Suggestions
from diel.search.samplers import parse_strategy
from diel.search.settings import SearchSettings, parse_settings, validate_settings

__all__ = ["main", "validate_settings", "prepare", "run_search", "SearchSummary", "MAX_DRAIN"]

MAX_DRAIN = 1000  # reports taken in one pass at most, so commits stay bounded
DEFER_S = 0.5     # longest a running trial's start, epoch or suggest report waits uncommitted
SLOW_PROPOSALS_S = 0.05   # a pass's proposals expected this long: its results committed first
MAX_PREFETCH = 8  # tasks queued per worker at most when the queue sizes itself
DEFAULT_MAX_ATTEMPTS = 2  # dispatches of a trial the job may die in before it is given up
SMOOTHING = 0.2   # weight of the newest sample in the running means of pass and trial time


class Space(Protocol):
    """The part of the tuple-space client the master uses."""

    def tput(self, tag: str, value: Any) -> None: ...
    def tput_many(self, tag: str, values: list[Any]) -> None: ...
    def tget_many(self, tag: str, limit: int, timeout: float | None = None) -> list[Any]: ...
    def try_tget(self, tag: str) -> Any: ...


@dataclass(frozen=True)
class SearchSummary:
    """How a search ended."""

    study: str
    url: str
    stop_reason: str
    stats: Stats
    best: list[dict[str, Any]]   # the reported trials: the best, or the Pareto front


def main(ctx: Any) -> None:
    """Run the search master (only rank 0 of copy 0 of the module does anything).

    Uses ``ctx.config``, ``ctx.name``, ``ctx.copy``, ``ctx.rank``, ``ctx.log``,
    ``ctx.space``, ``ctx.workflow_dir``, ``ctx.workflow_name``,
    ``ctx.module_copies(name)`` (how many copies the worker module has) and, where the
    context has them, ``ctx.module_settings(name)`` (the worker's ``max_attempts``) and
    ``ctx.wall_time`` (when the job is to stop: :class:`~diel.executive.walltime.WallTime`).
    """
    if ctx.copy != 0 or ctx.rank != 0:
        ctx.log.info("search master runs on rank 0 of copy 0 only; this rank has nothing to do")
        return
    settings = parse_settings(ctx.config, f"modules.{ctx.name}.settings")
    try:
        workers = ctx.module_copies(settings.workers)
    except (KeyError, ValueError) as e:
        raise ConfigError(f"modules.{ctx.name}.settings.workers",
                          f"the worker module {settings.workers!r} is not in the workflow "
                          f"({e})") from e
    max_attempts = _max_attempts(ctx, settings.workers)
    study = study_of_search(ctx.config, ctx.workflow_name)
    url = database_url(settings.database, ctx.workflow_dir, ctx.workflow_name)
    with deferred() as interrupts:   # from here on, a signal never cuts a write in half
        store = get_storage(url, f"modules.{ctx.name}.settings.database")
        try:
            run_search(ctx.space, settings, store, workers, study=study, log=ctx.log,
                       max_attempts=max_attempts, interrupts=interrupts,
                       path=f"modules.{ctx.name}.settings",
                       wall_time=getattr(ctx, "wall_time", None),
                       checkpoints=checkpoint_dir(settings.checkpoints.dir, url,
                                                  ctx.workflow_dir))
        finally:
            store.close()


def prepare(settings: dict, module: Any, workflow: Any, node: Any) -> None:
    """Import the modules of the study's results store (:func:`~diel.results.storage_class`
    for its ``database``: SQLAlchemy's and diel's SQL store, with the URL's dialect, some
    0.2 s of CPU, for any URL but ``memory://``) as soon as the rank knows it runs the
    master (the executive calls this: :func:`~diel.executive.modules.prepare_module`):
    before MPI starts where the launcher tells the rank its place, while the other ranks
    wait sleeping, rather than after it, with a core idle. ``main`` opens the store as
    before, and tells what fails there. NumPy's random module too, for a strategy that
    :attr:`~diel.search.samplers.Sampler.draws`: NumPy loads it on first use, which was
    the first proposal's, some 10 ms while the workers waited for their first tasks."""
    from diel.results import SQL_SCHEMES, scheme_of, storage_class

    parsed = parse_settings(settings, f"modules.{module.name}.settings")
    if parsed.sampler.draws:
        import numpy.random  # noqa: F401
    url = database_url(parsed.database, workflow.path.parent, workflow.name)
    storage_class(url, f"modules.{module.name}.settings.database")
    if scheme_of(url) in SQL_SCHEMES:
        from sqlalchemy.engine import make_url

        try:
            make_url(url).get_dialect()
        except Exception:  # noqa: BLE001 - a driver missing: main says so, opening the store
            pass


def _max_attempts(ctx: Any, workers: str) -> int:
    """The worker module's ``max_attempts`` setting (default 2); contexts without
    ``module_settings`` get the default."""
    module_settings = getattr(ctx, "module_settings", None)
    if module_settings is None:
        return DEFAULT_MAX_ATTEMPTS
    value = (module_settings(workers) or {}).get("max_attempts", DEFAULT_MAX_ATTEMPTS)
    return whole_number(value, f"modules.{workers}.settings.max_attempts", 1, got=", got")


def run_search(space: Space, settings: SearchSettings, store: Storage, workers: int,
               study: str, log: logging.Logger | None = None, out: TextIO | None = None,
               poll: float = 0.5, clock: Callable[[], float] = time.monotonic,
               max_attempts: int = DEFAULT_MAX_ATTEMPTS, interrupts: Deferral | None = None,
               path: str = "settings", wall_time: WallTime | None = None,
               checkpoints: Path | None = None) -> SearchSummary:
    """Run a whole search over ``space`` with ``workers`` worker copies; return how it
    ended. Stops every worker (one ``None`` task each) before returning, also on error,
    but not when interrupted (the whole job is stopping then).

    The run holds the study's lease throughout and gives it back however it ends
    (:class:`~diel.errors.StudyBusy` at once when another run holds it). A resume with
    another strategy, or with a space that lacks some of the study's trials, is refused
    with a :class:`ConfigError` at ``path`` (the settings' key path) before anything is
    written; a changed objective or direction is applied to the stored trials. A trial
    left ``running`` by a crash after ``max_attempts`` dispatches is recorded ``failed``
    rather than run again (see :meth:`Storage.open_study`).

    ``interrupts`` holds the signals noted since :func:`diel.executive.interrupts.deferred` began
    (None: none will be); it is asked once a pass, and a wait on ``space`` ends at once
    when a signal comes. Then the master stops dispatching, commits what it has, takes
    back the dispatches of the trials still running (they run again first on resume,
    without being charged an attempt), prints one line on stderr and raises
    :class:`~diel.executive.interrupts.Interrupted`.

    ``wall_time`` says when to stop and keep the trials' progress (module docstring:
    the trials pause, and :class:`~diel.executive.walltime.Stopped` is raised).
    ``checkpoints`` is the search's checkpoint folder (default: as
    :func:`~diel.search.protocol.checkpoint_dir` puts it for ``store``'s URL, relative
    to the current folder); the study's checkpoints are in its study folder there.
    """
    if workers < 1:
        raise ValueError(f"a search needs at least one worker copy, got {workers}")
    log = log or logging.getLogger("diel.search")
    out = out or sys.stdout
    interrupts = interrupts or Deferral()
    wall_time = wall_time or WallTime()
    root = checkpoints or checkpoint_dir(settings.checkpoints.dir, store.url, Path.cwd())
    lease = None
    try:
        lease = _acquire(store, study, path)
        state = _open(store, settings, study, max_attempts, path, log)
        seed = _seed(settings, state.config, store, state.study_id, log)
        engine = SearchEngine(settings, state, seed, clock, workers=workers)
        where = terminal_of(out)
        progress = ProgressDisplay(out, study, settings.progress_interval, clock,
                                   tty=where.live, width=where.width)
        retention = _retention(store, settings, state, study, root, log,
                               engine.donor_restores)
        loop = _Loop(_InterruptibleSpace(space, interrupts), engine, store, state.study_id,
                     study, workers, settings.mode, settings.prefetch, log, lease,
                     settings.workers, retention, _Stop(wall_time, settings.stop_grace, clock),
                     Suggestions(settings.space, engine.sampler, state.running))
        space.tput(declared_tag(study), settings.space.declarations())   # for suggest_*
        signum = _drive(loop, engine, progress, poll, interrupts, workers)
        if loop.fatal is not None:
            raise _unservable(loop.fatal, settings.workers)
    finally:
        if lease is not None:
            _release(store, lease, log)
        if interrupts() is None:
            for _ in range(workers):
                space.tput(task_tag(study), None)
            space.try_tget(declared_tag(study))
    progress.close(engine.stats(workers))
    if signum is not None:
        left = len(engine.unfinished)
        sys.stderr.write(f"diel: interrupted: {left} trial{'' if left == 1 else 's'} left "
                         "running will run again on resume\n")   # one write, one line
        sys.stderr.flush()
        raise Interrupted(signum)
    if engine.halted:
        raise Stopped(_stopped_line(engine, loop))   # the executive prints its one line
    reason = engine.stop_reason or "done"
    log.debug("search %s finished: %s", study, reason)
    best = _report(store, settings, study, reason, out, where.width)
    return SearchSummary(study, store.url, reason, engine.stats(workers), best)


def _report(store: Storage, settings: SearchSettings, study: str, reason: str,
            out: TextIO, width: int = DEFAULT_WIDTH) -> list[dict[str, Any]]:
    """Print the final report and return its trials: the ``report_top`` best ok trials,
    or with several objectives the Pareto front (all of it, unless ``report_top`` is
    set), best first in the first objective; read back from ``store``. Its table fits
    in ``width`` columns (:func:`~diel.search.report.trial_table`); the line after it
    names the ``diel results`` command that shows the columns left out."""
    if not settings.objectives.several:
        best = store.best(study, settings.objective.direction, settings.report_top)
        print(f"best {len(best)} of study {study} ({reason}):", file=out)
    else:
        front = pareto_trials(store.trials(study, status="ok"), settings.objectives.specs)
        best = front[:settings.report_top]
        shown = f"the first {len(best)} of " if len(best) < len(front) else ""
        print(f"Pareto front of study {study} ({reason}): {shown}{len(front)} trial"
              f"{'' if len(front) == 1 else 's'} that no other beats in every objective "
              f"({_listed(settings.objectives.specs)}):", file=out)
    if not best:
        print("no trial finished ok", file=out)
    else:
        several = settings.objectives.several
        table, left_out = trial_table(best, settings.space.names, [
            text for text, _ in settings.objectives.specs] if several else None, width)
        print(table, file=out)
        if left_out:
            print(more_line(store.url, study, settings.report_top, several), file=out)
        if settings.sampler.schedules:   # pbt: the best member's parameters changed
            number = best[0]["number"]
            print(_schedule(store.segments(study, number), number), file=out)
    out.flush()
    return best


def _schedule(segments: Sequence[Segment], number: int) -> str:
    """Trial ``number``'s schedule, a line per segment: its epochs, the trial and step it
    went on from, its parameters (``diel results --lineage`` has the table)."""
    lines = [f"schedule of trial {number} (diel results --lineage {number}):"]
    for segment in segments:
        end = "" if segment.to_step is None else segment.to_step
        parent = "" if segment.parent_trial is None else \
            f" from trial {segment.parent_trial} step {segment.parent_step}"
        params = ", ".join(f"{name}={value:.4g}" if isinstance(value, float) else
                           f"{name}={value}" for name, value in segment.params.items())
        lines.append(clip(f"  epochs {segment.from_step}-{end}{parent}: {params}",
                          LOG_TEXT_CHARS))
    return "\n".join(lines)


def _retention(store: Storage, settings: SearchSettings, state: StudyState, study: str,
               root: Path, log: logging.Logger,
               holds: Mapping[int, tuple[int, Checkpoint]] | None = None) -> Retention:
    """The study's checkpoint keeping, told what earlier runs kept and which trials
    finished; what the settings no longer keep (``keep_best`` lowered, a crash before a
    deletion) and a crash's temporary files are deleted now. ``holds``: the donors'
    checkpoints members go on from (a member killed after its exploit, before its next
    checkpoint: :attr:`SearchEngine.donor_restores`), kept until the member read them."""
    retention = Retention(layout.study_folder(root, study), settings.checkpoints.keep,
                          settings.checkpoints.keep_best,
                          settings.objectives.directions[0] == "maximize", log)
    retention.load(store.study_checkpoints(study))
    doomed: list[Checkpoint] = []
    for member, (donor, checkpoint) in (holds or {}).items():
        retention.hold(member, donor, checkpoint.step)
        doomed += retention.superseded(member, None)   # left kept by a kill
    for trial in sorted(state.finished, key=lambda t: t.number):
        score = trial.scores[0] if trial.status == "ok" else None
        doomed += retention.finished(trial.number, score if score is None or
                                     math.isfinite(score) else None)
    _delete(store, state.study_id, retention, doomed)
    removed = retention.remove_leftovers()
    if removed:
        log.info("deleted %d temporary checkpoint file(s) a crash left in %s", removed,
                 retention.folder)
    return retention


def _delete(store: Storage, study_id: int, retention: Retention,
            doomed: Sequence[Checkpoint]) -> None:
    """Mark ``doomed`` deleted in the database, then delete their files."""
    if doomed:
        store.delete_checkpoints(study_id, [(c.number, c.step) for c in doomed])
        retention.delete_files(doomed)


@dataclass
class _Stop:
    """A wall-time stop under way: why (None: none asked yet) and until when the master
    waits for its trials to pause."""

    wall_time: WallTime
    grace: float
    clock: Callable[[], float]
    reason: str | None = None
    deadline: float = math.inf
    overdue: int = 0   # trials that did not stop within the grace, taken back

    def asked(self) -> str | None:
        """The reason of a stop asked for since the last call, once."""
        if self.reason is not None:
            return None
        self.reason = self.wall_time.reason()
        if self.reason is not None:
            self.deadline = self.clock() + self.grace
        return self.reason


def _stopped_line(engine: SearchEngine, loop: _Loop) -> str:
    """The one line a wall-time stop ends the job with."""
    paused = sorted(engine.paused)
    kept = sum(loop.retention.holds(n) for n in paused)
    parts = [f"{kept} trial{'' if kept == 1 else 's'} paused with "
             f"{'a checkpoint' if kept == 1 else 'checkpoints'}"]
    if len(paused) > kept:
        fresh = len(paused) - kept
        parts.append(f"{fresh} paused without one (start{'s' if fresh == 1 else ''} again "
                     "from scratch)")
    if loop.stop.overdue:
        one = loop.stop.overdue == 1
        parts.append(f"{loop.stop.overdue} did not pause within stop_grace "
                     f"({loop.stop.grace:g} s) and {'is' if one else 'are'} run again first "
                     f"(from {'its' if one else 'their'} last checkpoint, if any)")
    why = "the wall-time limit" if loop.stop.reason == "SIGUSR1" else loop.stop.reason
    return f"diel: stopped at {why}: {', '.join(parts)}; run the same command to resume"


def _drive(loop: _Loop, engine: SearchEngine, progress: ProgressDisplay, poll: float,
           interrupts: Deferral, workers: int) -> int | None:
    """The master's loop, until the search is done, a worker cannot serve
    (:attr:`_Loop.fatal`; None), a wall-time stop has paused its trials (None,
    ``engine.halted``) or it is interrupted (the signal)."""
    stop = loop.stop
    try:
        while interrupts() is None:
            loop.commit_and_dispatch()
            loop.keep_lease()
            reason = stop.asked()
            if reason is not None:
                loop.begin_stop(reason)
            if engine.halted:
                loop.order_pauses()
                if engine.running and stop.clock() >= stop.deadline:
                    loop.take_back_overdue()
            if engine.done:
                loop.collect(0.0)   # checkpoint reports that came with the last results
                loop.commit_and_dispatch()
                return None
            loop.collect(poll)
            if loop.fatal is not None:
                loop.take_back_all()
                return None
            engine.check_time()
            if engine.cut_short:
                loop.withdraw_queued()
            loop.watch_queue()
            progress.update(engine.stats(workers))
    except Interrupted:   # raised only while waiting on the space: every write is whole
        pass
    loop.stop_interrupted()
    return interrupts()


class _InterruptibleSpace:
    """The master's tuple space, whose calls an interrupt ends at once: the server rank
    gets the signal too and may be gone before it answers."""

    def __init__(self, space: Space, interrupts: Deferral) -> None:
        self.space, self.interrupts = space, interrupts

    def tput(self, tag: str, value: Any) -> None:
        with self.interrupts.raising():
            self.space.tput(tag, value)

    def tput_many(self, tag: str, values: list[Any]) -> None:
        with self.interrupts.raising():
            self.space.tput_many(tag, values)

    def tget_many(self, tag: str, limit: int, timeout: float | None = None) -> list[Any]:
        with self.interrupts.raising():
            return self.space.tget_many(tag, limit, timeout=timeout)

    def try_tget(self, tag: str) -> Any:
        with self.interrupts.raising():
            return self.space.try_tget(tag)


def _open(store: Storage, settings: SearchSettings, study: str, max_attempts: int, path: str,
          log: logging.Logger) -> StudyState:
    """Open the study for this run: refuse a changed strategy or space (nothing written),
    apply changed objectives or directions to the stored trials, store this run's
    settings."""
    state = store.open_study(study, settings.strategy, settings.objective.text,
                             settings.objective.direction, _stored_config(settings),
                             max_attempts,
                             check=lambda stored: check_resumable(settings, stored, study, path),
                             objectives=settings.objectives.specs)
    if state.finished or state.running:
        paused = sum(trial.status == "paused" for trial in state.running)
        resumed = sum(bool(trial.checkpoints) for trial in state.running)
        log.info("resuming study %s: %d trials finished, %d left running and %d paused are "
                 "run again (%d from a checkpoint), %d given up after %d attempt(s)", study,
                 len(state.finished), len(state.running) - paused, paused, resumed,
                 len(state.given_up), max_attempts)
    for trial in state.given_up:
        log.warning("trial %d given up, recorded failed: %s", trial.number, trial.error)
    _log_new_options(log, study, state.config.get("strategy"), settings)
    scores = rescored(settings, state)
    if scores is not None:
        objectives = settings.objectives
        store.rescore(state.study_id, objectives.specs, scores)
        _log_rescore(log, study, state, settings, scores)
        state = dataclasses.replace(
            state, objective=settings.objective.text, direction=settings.objective.direction,
            objectives=objectives.specs,
            finished=[_rescored_trial(t, scores, objectives.several) for t in state.finished])
    config = {**state.config, **_stored_config(settings)}
    if config != state.config:
        store.update_config(state.study_id, config)
    return state


def _rescored_trial(trial: StoredTrial, scores: dict[int, tuple[float | None, ...] | None],
                    several: bool) -> StoredTrial:
    """A stored trial as :meth:`Storage.rescore` just rewrote it (unchanged when not in
    ``scores``: only directions changed)."""
    if trial.number not in scores:
        return trial
    values = scores[trial.number]
    return dataclasses.replace(trial, objective=values[0] if values else None,
                               objective_values=values if several and values else None)


def _log_rescore(log: logging.Logger, study: str, state: StudyState, settings: SearchSettings,
                 scores: dict[int, tuple[float | None, ...] | None]) -> None:
    """Say that changed objectives (or directions) now rank the stored trials."""
    before, after = state.objectives, settings.objectives.specs
    one = len(before) == 1 and len(after) == 1
    if not scores:
        if one:
            log.info("study %s: direction changed from %s to %s; its stored trials are ranked "
                     "by it now", study, before[0][1], after[0][1])
        else:
            log.info("study %s: directions changed from %s to %s; its stored trials are "
                     "ranked by them now", study, _listed(before), _listed(after))
        return
    scored = [t for t in state.finished if t.status in ("ok", "pruned")]
    lacking = sum(not scores.get(t.number) or None in scores[t.number]  # type: ignore[operator]
                  for t in scored)
    if one:
        changed = (f"objective changed from {before[0][0]!r} ({before[0][1]}) to "
                   f"{after[0][0]!r} ({after[0][1]}); recomputed the objective")
        missing = "no objective"
    else:
        changed = (f"objectives changed from {_listed(before)} to {_listed(after)}; "
                   "recomputed the objectives")
        missing = "no value for it"
    log.info("study %s: %s of %d stored trial(s) from their metrics%s", study, changed,
             len(scored), f" ({lacking} lack a metric it needs: {missing})" if lacking else "")


def _listed(specs: Sequence[tuple[str, str]]) -> str:
    """``'accuracy' (maximize), 'time' (minimize)``, for the log."""
    return ", ".join(f"{text!r} ({direction})" for text, direction in specs)


def _log_new_options(log: logging.Logger, study: str, stored: Any,
                     settings: SearchSettings) -> None:
    """Say that the strategy's options changed since the study's last run: allowed (the
    sampler is rebuilt from the stored trials, so the new options apply to everything it
    proposes from now on), but worth a warning, as the study's trials so far were
    proposed under the old ones. A changed strategy is refused (check_resumable)."""
    if stored is None:
        return
    before = parse_strategy(stored, "strategy")[1] if isinstance(stored, (str, dict)) else {}
    if before != settings.strategy_options:
        log.warning("study %s: the options of strategy %s changed from %s to %s; its %s "
                    "sampler is rebuilt from the stored trials with the new ones", study,
                    settings.strategy, before or "none", settings.strategy_options or "none",
                    settings.strategy)


def _unservable(report: dict[str, Any], workers: str) -> ConfigError:
    """The error that ends the job when a worker cannot serve: one line at the worker
    module's setting its ``fatal`` report names."""
    setting = report.get("setting")
    if not isinstance(setting, str) or not setting.isidentifier():
        setting = "run"
    lines = str(report.get("error") or "").splitlines()
    reason = clip(lines[0], LOG_TEXT_CHARS) if lines else "it reported no reason"
    return ConfigError(f"modules.{workers}.settings.{setting}", reason)


def _acquire(store: Storage, study: str, path: str) -> Lease:
    """The study's lease; a :class:`StudyBusy` names the other way out too."""
    try:
        return store.acquire_lease(study)
    except StudyBusy as e:
        raise StudyBusy(f"{e}, or give this run a study of its own ({path}.study)") from None


def _release(store: Storage, lease: Lease, log: logging.Logger) -> None:
    """Give the lease back; a database that fails now only delays the next run (the
    lease goes stale), so that is a warning, not a second error; none at all for a full
    disk, which has its own line (the next run on this host takes the lease over)."""
    try:
        store.release_lease(lease)
    except DatabaseUnwritable:
        log.debug("could not release the lease of study %s: its database is full", lease.study)
    except ResultsError as e:
        log.warning("could not release the lease of study %s: %s", lease.study, e)


def _stored_config(settings: SearchSettings) -> dict[str, Any]:
    """The settings as stored with the study (the seed filled in by :func:`_seed`)."""
    return {k: v for k, v in settings.raw.items() if k != "database" and v is not None}


def _seed(settings: SearchSettings, stored: dict[str, Any], store: Storage,
          study_id: int, log: logging.Logger) -> int:
    """The random seed: the setting, else the one an earlier run of the study drew, else a
    fresh one (logged and stored with the study, so a resumed run draws the same)."""
    if settings.seed is not None:
        return settings.seed
    if isinstance(stored.get("seed"), int):
        return stored["seed"]
    seed = secrets.randbits(32)
    log.info("no seed given; using seed %d", seed)
    store.update_config(study_id, {"seed": seed})
    return seed


class _Loop:
    """The transport half of the master: moves messages between space, engine and store."""

    def __init__(self, space: Space, engine: SearchEngine, store: Storage, study_id: int,
                 study: str, workers: int, mode: str, prefetch: int | None,
                 log: logging.Logger, lease: Lease | None = None,
                 worker_module: str = DEFAULT_WORKERS,
                 retention: Retention | None = None, stop: _Stop | None = None,
                 suggestions: Suggestions | None = None) -> None:
        self.space, self.engine, self.store = space, engine, store
        self.study_id, self.study, self.workers = study_id, study, workers
        self.mode, self.log = mode, log
        self.prefetch = prefetch
        self.lease = lease
        self.worker_module = worker_module
        self.fatal: dict[str, Any] | None = None   # the first worker's fatal report
        self.untaken_noted = False   # the warning about untaken tasks was given
        self.beat_at = time.monotonic()  # the lease was taken (its first heartbeat) just now
        self.pass_time = 0.0   # running mean of a master pass (commit, dispatch, handling)
        self.trial_time = 0.0  # running mean of the trials' own times, from their results
        self.propose_time = 0.0   # running mean of one proposal (the engine's next_trial)
        self.started: dict[int, StartedRecord] = {}   # by trial, until committed
        self.epochs: list[EpochRecord] = []
        self.results: list[ResultRecord] = []
        self.checkpoints: list[Checkpoint] = []
        self.suggested: list[Suggested] = []
        self.suggestions = suggestions   # made on the first suggest report when not given
        self.deferred_since: float | None = None   # when uncommitted reports began to wait
        # Loops made without them (unit tests) keep every checkpoint of the current folder
        # and are never asked to stop.
        self.retention = retention or Retention(Path.cwd(), 1, 1, True, log)
        self.stop = stop or _Stop(WallTime(), 0.0, time.monotonic)

    def commit_and_dispatch(self) -> None:
        """Commit the reports taken so far together with the trials about to start, in
        one transaction, then put those trials' tasks. Async mode fills every free
        worker; batch mode starts a group of ``workers`` trials only once the previous
        group has fully reported. A strategy that learns from results can propose slowly
        (gp: seconds a proposal past a few hundred trials), so when the pass's proposals
        are expected to take SLOW_PROPOSALS_S or more, the reports are committed first, in
        a transaction of their own: a finished trial is durable before the proposals, not
        seconds after them (faster ones, tpe's milliseconds, go in the one transaction);
        and the lease's heartbeat moves on between proposals, which can add up to longer
        than a lease lives without one."""
        started = time.perf_counter()
        if (self.engine.sampler.learns_from_results and self.results and
                self._slow_proposals()) or \
                any(result.status == "paused" for result in self.results):
            self._commit_reports()   # a paused trial may be dispatched again in this pass
        starts = []
        if self.mode == "async" or not self.engine.running:
            while len(self.engine.running) < self.capacity():
                began = time.perf_counter()
                start = self.engine.next_trial()
                self.propose_time = _mean(self.propose_time, time.perf_counter() - began)
                if start is None:
                    break
                starts.append(start)
                self.keep_lease()
        for line in self.engine.take_notes():   # exploits carried out otherwise
            self.log.warning("%s", line)
        self._end_unpromotable()
        if starts or self._must_commit():
            self._commit_reports(starts)
        elif self.deferred_since is None and self._pending():
            self.deferred_since = time.monotonic()
        self.engine.queued([start.number for start in starts], datetime.now(timezone.utc))
        if starts:   # one message for the pass's tasks
            self.space.tput_many(task_tag(self.study),
                                 [self.engine.task(start.number) for start in starts])
        self.pass_time = _mean(self.pass_time, time.perf_counter() - started)

    def answer(self, report: dict[str, Any], order: Any) -> None:
        """Answer an epoch report: its scheduler's ``order`` (STOP, PAUSE), else
        :func:`~diel.search.protocol.go_on` when it is at one of the trial's decision
        points, where its worker waits (also for a report of a trial not running here:
        the worker waits all the same)."""
        number, epoch = report.get("trial"), report.get("epoch")
        if order is not None:
            self.space.tput(prune_tag(self.study, number), order)
        elif self.engine.waits_at(number, epoch):
            self.space.tput(prune_tag(self.study, number), go_on(epoch))

    def _slow_proposals(self) -> bool:
        """The proposals this pass is about to make (one a free place, each as long as
        the running mean so far) are expected to take SLOW_PROPOSALS_S or more."""
        if self.mode != "async" and self.engine.running:
            return False   # batch mode proposes once the whole group has reported
        free = self.capacity() - len(self.engine.running)
        return free * self.propose_time >= SLOW_PROPOSALS_S

    def _pending(self) -> bool:
        """Reports are taken and not committed yet."""
        return bool(self.epochs or self.results or self.started or self.checkpoints or
                    self.suggested)

    def _must_commit(self) -> bool:
        """This pass commits the reports it holds. A result or a checkpoint is committed
        before the master dispatches or waits again (with everything else taken so far).
        A running trial's start, epoch and suggest reports alone wait for the next commit,
        DEFER_S at most, so that a fast trial's reports do not cost a transaction each (a
        SQLite commit is most of a pass). A crash before that commit loses nothing that
        matters: the trial is still ``running`` in the database and its rerun reports
        them again (its epochs past the step it resumes from are deleted at its
        dispatch). The end of the search commits everything."""
        if self.results or self.checkpoints or self.engine.done or self.engine.halted:
            return self._pending()
        return self.deferred_since is not None and \
            time.monotonic() - self.deferred_since >= DEFER_S

    def _end_unpromotable(self) -> None:
        """Take the paused trials that can no longer be promoted (nothing runs, nothing
        starts) as ended ``pruned``, to commit with the other reports."""
        for outcome in self.engine.unpromotable():
            self.results.append(outcome.record)
            self.log.info("trial %d was not promoted: pruned at step %s",
                          outcome.record.number, outcome.record.epoch)

    def _commit_reports(self, starts: Sequence[TrialStart] = ()) -> None:
        """Commit the reports taken so far (with ``starts``, the trials about to be
        dispatched), in one transaction. A trial whose start and result came in the same
        pass has its start in its result (one statement fewer on the critical path)."""
        self.store.record(self.study_id, self.epochs, self.results, starts,
                          list(self.started.values()), self.checkpoints, self.suggested)
        doomed: list[Checkpoint] = []
        for number in {report.number for report in (*self.epochs, *self.results)}:
            doomed += self.retention.release(number)   # it has read its donor's checkpoint
        for start in starts:
            if start.parent_trial is not None:   # an exploit, or a resample on its own
                own = start.parent_trial == start.number
                if not own:
                    self.retention.hold(start.number, start.parent_trial,
                                        start.resumed_from)  # type: ignore[arg-type]
                doomed += self.retention.superseded(start.number,
                                                    start.resumed_from if own else None)
        for checkpoint in self.checkpoints:
            doomed += self.retention.added(checkpoint)
        for result in self.results:
            if result.status != "paused":
                score = result.objective if result.status == "ok" else None
                doomed += self.retention.finished(result.number, score)
        self.started, self.epochs, self.results, self.checkpoints = {}, [], [], []
        self.suggested, self.deferred_since = [], None
        _delete(self.store, self.study_id, self.retention, doomed)

    def keep_lease(self) -> None:
        """Move the lease's heartbeat on when one is due (every HEARTBEAT_S seconds)."""
        if self.lease is not None and time.monotonic() - self.beat_at >= HEARTBEAT_S:
            self.store.heartbeat(self.lease)
            self.beat_at = time.monotonic()

    def stop_interrupted(self) -> None:
        """On an interrupt: commit the reports taken so far, dispatch nothing, and take
        back the dispatches of the trials still running or queued (they stay ``running``
        and run again first on resume, without being charged an attempt); a worker
        whose answer is held is released (go on), so that none waits for a gone master."""
        self._commit_reports()
        self.release_held(every=True)
        if self.engine.running:
            self.store.forget(self.study_id, list(self.engine.running), interrupted=True)

    def begin_stop(self, reason: str) -> None:
        """A wall-time stop: start nothing more, take back the tasks no worker took."""
        self.engine.halt(reason)
        self.withdraw_queued()
        self.log.info("search %s: stopping (%s): %d running trial(s) are asked to pause",
                      self.study, reason, len(self.engine.running))

    def order_pauses(self) -> None:
        """Order every running trial not ordered yet to pause (its prune tag)."""
        for number in self.engine.pause_orders():
            self.space.tput(prune_tag(self.study, number), PAUSE)

    def take_back_overdue(self) -> None:
        """The grace of a wall-time stop is over: commit what came, and take back the
        dispatches of the trials still running (uncharged: they run again first, from
        their last kept checkpoint)."""
        numbers = list(self.engine.running)
        self._commit_reports()
        self.store.forget(self.study_id, numbers, interrupted=True)
        for number in numbers:
            self.engine.withdraw(number)
        self.stop.overdue = len(numbers)
        self.log.warning("search %s: %d trial(s) did not pause within stop_grace (%g s): "
                         "taken back, they run again first", self.study, len(numbers),
                         self.stop.grace)

    def take_back_all(self) -> None:
        """When a worker cannot serve and the job is to end: commit the reports taken so
        far, take back the tasks no worker took (their first dispatches deleted: they
        never ran) and the dispatches of the trials running (their rows stay
        ``running``, not charged), so no trial is charged an attempt for the end."""
        self._commit_reports()
        self.withdraw_queued()
        if self.engine.running:
            self.store.forget(self.study_id, list(self.engine.running), interrupted=True)

    def watch_queue(self) -> None:
        """Warn once when tasks have waited UNTAKEN_NOTE_S with a worker free to take
        them (:meth:`SearchEngine.untaken_for`), naming the tag and what to check; again
        if it happens again after a worker took one."""
        untaken = self.engine.untaken_for(self.workers)
        if untaken < UNTAKEN_NOTE_S:
            self.untaken_noted = self.untaken_noted and untaken > 0
            return
        if not self.untaken_noted:
            waiting = sum(trial.started_at is None for trial in self.engine.running.values())
            self.log.warning("search %s: no worker has taken a task from tag %s for %.0f s "
                             "while %d wait; check that the workers (module %r) are running "
                             "and serve study %r", self.study, task_tag(self.study), untaken,
                             waiting, self.worker_module, self.study)
            self.untaken_noted = True

    def capacity(self) -> int:
        """Trials dispatched at once. Batch: one per worker. Async: each worker runs one
        and finds ``prefetch`` more queued, so it never waits for the master's commit;
        with ``prefetch: auto`` the queue is as deep as a master pass is longer than a
        trial (1 for trials of a second, up to MAX_PREFETCH for trials of microseconds),
        and empty for a strategy that learns from results (tpe, gp, cmaes, nsga2), whose
        proposals would otherwise be made without the results of the queued trials.

        While trials re-queued after a crash are pending (``engine.recovering``), one per
        worker in every mode: a task queued ahead but not started when the job dies again
        would be charged an attempt for a run it never had."""
        if self.mode != "async" or self.engine.recovering:
            return self.workers
        depth = self.prefetch
        if depth is None and self.engine.sampler.learns_from_results:
            depth = 0
        elif depth is None:
            depth = 1 if not self.trial_time else \
                min(MAX_PREFETCH, max(1, math.ceil(self.pass_time / self.trial_time)))
        return self.workers * (1 + depth)

    def withdraw_queued(self) -> None:
        """After a threshold or the time budget ended the search: take back tasks no
        worker has started and delete their ``running`` rows, so that only trials that
        really ran are recorded (grid points taken back run when the study resumes)."""
        numbers = []
        while True:
            task = self.space.try_tget(task_tag(self.study))
            if not isinstance(task, dict):
                break
            numbers.append(task["trial"])
        if numbers:
            for number in numbers:
                self.engine.withdraw(number)
            self.store.forget(self.study_id, numbers)
            self.log.info("took back %d queued trial(s) that no worker had started", len(numbers))

    def collect(self, poll: float) -> None:
        """Wait up to ``poll`` s for a report and take the others already there (one
        round trip); they are committed by the next :meth:`commit_and_dispatch`, before
        any new task. While reports wait uncommitted, the wait ends when they are due
        (DEFER_S)."""
        if self.deferred_since is not None:
            poll = min(poll, max(0.0, self.deferred_since + DEFER_S - time.monotonic()))
        try:
            reports = self.space.tget_many(report_tag(self.study), MAX_DRAIN, timeout=poll)
        except TimeoutError:
            reports = []
        for report in reports:
            if isinstance(report, list):   # a worker's result and its next start
                for one in report:
                    self._handle(one)
            else:
                self._handle(report)
        self.release_held()

    def release_held(self, every: bool = False) -> None:
        """Put the held answers now due (:meth:`SearchEngine.released`: a synchronous
        pbt generation decided, a member that ended leaving it, the search stopping, or
        ``every``) on their trials' prune tags, where their workers wait."""
        for number, order in self.engine.released(every):
            self.space.tput(prune_tag(self.study, number), order)

    def _handle(self, report: Any) -> None:
        if not is_report(report):
            self.log.warning("ignoring a malformed report: %s", _quoted(report))
            return
        if report["kind"] == "start":
            started = self.engine.on_start(report)
            if started is None:
                self.log.warning("ignoring a start report for no queued trial: %s",
                                 _quoted(report))
                return
            self.started[started.number] = started
            return
        if report["kind"] == "fatal":
            self.fatal = self.fatal or report
            return
        if report["kind"] == "checkpoint":
            checkpoint = self.engine.on_checkpoint(report)
            if checkpoint is None or self.retention.misplaced(checkpoint):
                self.log.warning("ignoring a checkpoint report %s: %s", "for no trial "
                                 "dispatched in this run, or malformed" if checkpoint is None
                                 else f"whose file is not in {self.retention.folder}/trial-"
                                      f"{checkpoint.number}", _quoted(report))
                return
            self.checkpoints.append(checkpoint)
            self.engine.checkpointed(checkpoint)
            return
        if report["kind"] == "suggest":
            self.answer_suggest(report)
            return
        if report["kind"] == "epoch":
            record, order = self.engine.on_epoch(report)
            self.answer(report, order)   # first: its worker may be waiting for it
            if record is None:
                self.log.warning("ignoring an epoch report for no running trial: %s",
                                 _quoted(report))
                return
            self.epochs.append(record)
            return
        outcome = self.engine.on_result(report)
        if outcome is None:
            self.log.warning("ignoring a result for no running trial: %s", _quoted(report))
            return
        self.results.append(outcome.record)   # before the space call an interrupt may end
        if self.suggestions is not None and outcome.record.status != "paused":
            self.suggestions.finished(outcome.record.number)
        self.started.pop(outcome.record.number, None)   # the result carries its start
        if outcome.record.time is not None:
            self.trial_time = _mean(self.trial_time, outcome.record.time)
        if outcome.record.status == "failed":
            self.log.warning("trial %d failed: %s", outcome.record.number, outcome.record.error)
        if outcome.warning is not None:
            self.log.warning("%s", outcome.warning)
        if outcome.record.status == "paused":
            self.log.info("trial %d paused at step %s", outcome.record.number,
                          outcome.record.epoch)
        if outcome.stale_prune:
            self.space.try_tget(prune_tag(self.study, outcome.record.number))


    def answer_suggest(self, report: dict[str, Any]) -> None:
        """Answer a trial's ``suggest_*`` for a parameter the space does not declare
        (:mod:`diel.search.suggest`) on its suggestion tag, where its worker waits; the
        value is recorded with the pass's other reports."""
        number = report.get("trial")
        if type(number) is not int:
            self.log.warning("ignoring a malformed suggest report: %s", _quoted(report))
            return
        if self.suggestions is None:
            self.suggestions = Suggestions(self.engine.settings.space, self.engine.sampler)
        running = self.engine.running.get(number)
        answer, row = self.suggestions.answer(report, None if running is None
                                              else running.start.params)
        if row is not None:
            self.suggested.append(row)
        self.space.tput(suggestion_tag(self.study, number), answer)


def _quoted(report: Any) -> str:
    """A report as a log line quotes it: its repr, clipped (a worker's text is not
    trusted to be short)."""
    return clip(repr(report), LOG_TEXT_CHARS)


def _mean(mean: float, sample: float) -> float:
    """A running mean that follows recent samples (the first sample starts it)."""
    return sample if not mean else (1 - SMOOTHING) * mean + SMOOTHING * sample
