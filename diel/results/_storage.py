"""What the search master needs of a results database: the :class:`Storage` contract.

:class:`~diel.results.ResultsStore` implements it with SQLAlchemy (SQLite, PostgreSQL,
any URL); another backend is one more subclass, and the master (diel.search.master)
depends on this class only. The docstrings below are the contract; the results tests
run against it.

One run at a time (the lease). A master takes the study's lease before it opens the
study, moves its heartbeat on at least every :data:`HEARTBEAT_S` seconds while it runs,
and gives it back when it ends, interrupted included. While the lease is alive a second
run of the study is refused at once (:class:`~diel.errors.StudyBusy`, one line naming
the holder). A lease is stale, and is taken over with a log line, when its heartbeat is
older than :data:`STALE_AFTER_S` seconds, or when its holder ran on this host, that
process is gone and its heartbeat has not moved for two heartbeat periods (the same
host: a killed job can be rerun at once; two periods: a process of the same host name in
another PID namespace still proves it is alive by beating). Hosts sharing a database
should keep their clocks in step (NTP): ages are computed from the writers' clocks.

Write discipline (every method one transaction; only the lease holder writes): a trial's
row is written ``running`` before its task exists (its ``queued_at``); a worker's word
that it took the task sets its ``started_at``; results are recorded before the master
dispatches or waits again; see docs/search.md.

Segments and distributions (schema 7): a trial's parameters may change while it runs (a
population-based training member that exploits a donor); each set it ran with is a
:class:`Segment`, from the step it took effect, and its parent when it was copied from
another trial. A trial's ``params`` are its current ones (its last segment's). A
parameter the trial's function asked for as it ran (define-by-run) is a
:class:`Suggested` record, merged into its ``params`` with its distribution.

Checkpoints and attempts (schema 6): a trial's checkpoint is recorded once it is durable
(its file written and synced), and a trial dispatched again resumes from the latest one
recorded; each dispatch is an attempt, recorded with the step it resumed from. A
``paused`` trial stopped on request with its progress in a checkpoint: it is not
finished, and its pause is not charged as an attempt the job died in.

A write the database's storage refuses (a full disk, an exceeded quota, a failing
device) raises :class:`~diel.errors.DatabaseUnwritable`, whose one line says where and
that the same command resumes once space is freed.

Threads: every method is atomic and may be called from any thread, so that a thread can
read a study (:meth:`Storage.trials`) while the master writes it; only the lease holder
writes, so writes never race each other.

Implementations are plug-ins: :func:`diel.results.get_storage` picks one by the URL's
scheme from the entry-point group ``diel.storages`` (docs/extending.md), and
:mod:`diel.testing.storages` is the conformance suite every one must pass.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, ClassVar, Mapping, Sequence

__all__ = ["Storage", "Lease", "StudyState", "StoredTrial", "TrialStart", "StartedRecord",
           "EpochRecord", "ResultRecord", "Checkpoint", "Segment", "Suggested",
           "DatabaseProblem", "crash_error", "utcnow", "HEARTBEAT_S", "STALE_AFTER_S",
           "ObjectiveSpec"]

# One objective of a study as stored: its expression's text and its direction.
ObjectiveSpec = tuple[str, str]

HEARTBEAT_S = 2.0     # the master moves its lease's heartbeat on at least this often
STALE_AFTER_S = 15.0  # a heartbeat older than this: the holder is dead or hung


class DatabaseProblem(ValueError):
    """The results database cannot be used; ``str()`` is one line saying why and how to
    fix it (:meth:`Storage.check`)."""


def utcnow() -> datetime:
    """The current time, UTC, timezone-aware."""
    return datetime.now(timezone.utc)


def crash_error(attempts: int) -> str:
    """The error text of a trial given up after the job died ``attempts`` times."""
    return f"the job died {attempts} time{'' if attempts == 1 else 's'} while this trial ran"


@dataclass(frozen=True)
class Checkpoint:
    """A durable checkpoint of trial ``number``: its state as of ``step``, in the file
    ``path`` of ``nbytes`` bytes whose ``checksum`` names its algorithm
    (``"crc32:<8 hex>"``); ``created_at`` is when the master learned it was durable."""

    number: int
    step: int
    path: str
    nbytes: int
    checksum: str
    created_at: datetime = field(default_factory=utcnow)


@dataclass(frozen=True)
class Segment:
    """One stretch of trial ``trial``'s run under one parameter set (schema 7): the
    ``index``-th (0, 1, ...), in effect from step ``from_step`` (the step of the
    checkpoint it started from; 0: from scratch) to ``to_step`` (the next segment's
    ``from_step``, else the trial's last reported epoch; None when it reported none),
    with ``params``; ``parent_trial`` and ``parent_step`` name the trial (a number) and
    the step whose checkpoint it was copied from (None: its own run)."""

    trial: int
    index: int
    from_step: int
    to_step: int | None
    params: dict[str, Any]
    parent_trial: int | None = None
    parent_step: int | None = None


@dataclass(frozen=True)
class Suggested:
    """A parameter trial ``number``'s function asked for as it ran (define-by-run): its
    ``name``, the ``value`` it was given and the ``distribution`` it was drawn from, in
    diel's JSON form (``{"kind": "float"|"int"|"categorical", "low", "high", "log",
    "step", "choices"}``, only the keys that apply)."""

    number: int
    name: str
    value: Any
    distribution: dict[str, Any]


@dataclass(frozen=True)
class StoredTrial:
    """A trial already in the database when a study is opened. ``objective_values``: its
    value of each objective of a study of several (None: a study of one, whose value is
    ``objective``); see :attr:`scores`. A trial not finished (``running``, ``paused``)
    has its kept ``checkpoints``, newest first, and the ``epochs`` it reported so far.
    ``segments``: the parameter sets it ran with, in order (empty for a trial of a study
    without segments); ``distributions``: the distribution of each parameter its
    function asked for as it ran, by name (schema 7)."""

    number: int
    params: dict[str, Any]
    param_key: str
    status: str
    objective: float | None = None
    values: dict[str, Any] = field(default_factory=dict)  # accuracy, loss, time, extras
    epochs: dict[int, dict[str, Any]] = field(default_factory=dict)
    attempts: int = 1  # times dispatched so far (interrupted dispatches not counted)
    error: str | None = None
    objective_values: tuple[float | None, ...] | None = None
    checkpoints: tuple[Checkpoint, ...] = ()
    segments: tuple[Segment, ...] = ()
    distributions: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def scores(self) -> tuple[float | None, ...]:
        """The trial's value of each of its study's objectives, in order, whether the
        study has one objective or several (None: not computed)."""
        return self.objective_values if self.objective_values is not None else \
            (self.objective,)


@dataclass(frozen=True)
class StudyState:
    """What :meth:`Storage.open_study` found: finished trials (not to be re-run), trials
    not finished (to re-queue: left ``running`` by an earlier master, or ``paused``),
    in ``running``, and the study as stored: its
    config, strategy, objective and direction (for a new study, the ones just given),
    and ``objectives``, every objective as ``(expression, direction)`` (one pair for a
    study of one objective). ``given_up`` are the trials left running that were just
    recorded ``failed`` for having reached ``max_attempts`` (they are among ``finished``
    too)."""

    study_id: int
    finished: list[StoredTrial]
    running: list[StoredTrial]
    config: dict[str, Any]
    given_up: list[StoredTrial] = field(default_factory=list)
    strategy: str = ""
    objective: str = ""
    direction: str = ""
    objectives: tuple[ObjectiveSpec, ...] = ()

    @property
    def next_number(self) -> int:
        """The first trial number not used yet."""
        return 1 + max((t.number for t in self.finished + self.running), default=-1)


@dataclass(frozen=True)
class TrialStart:
    """A trial about to be dispatched with ``params``, its current parameters;
    ``resumed_from``: the step of the checkpoint it resumes from (None: from scratch).
    ``parent_trial`` and ``parent_step``: the trial (a number) and step whose checkpoint
    it resumes from when that is another trial's (an exploit; None: its own)."""

    number: int
    params: dict[str, Any]
    param_key: str
    resumed_from: int | None = None
    parent_trial: int | None = None
    parent_step: int | None = None


@dataclass(frozen=True)
class StartedRecord:
    """A worker took a dispatched trial's task: which worker copy, and when (its clock)."""

    number: int
    worker: int | None
    at: datetime


@dataclass(frozen=True)
class EpochRecord:
    """One epoch report of a running trial."""

    number: int
    epoch: int
    metrics: dict[str, Any]
    worker: int | None = None


@dataclass(frozen=True)
class ResultRecord:
    """The end of a trial. In a study of several objectives, ``objective_values`` holds
    the value of each (finite, or None) and ``objective`` the first; in a study of one,
    ``objective_values`` is None. ``started_at``, when given, is the trial's start."""

    number: int
    status: str
    objective: float | None = None
    time: float | None = None
    accuracy: float | None = None
    loss: float | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    worker: int | None = None
    epoch: int | None = None
    error: str | None = None
    finished_at: datetime = field(default_factory=utcnow)
    objective_values: tuple[float | None, ...] | None = None
    started_at: datetime | None = None   # when a worker took it, where known


@dataclass(frozen=True)
class Lease:
    """A run's hold on a study: who (``host``, ``pid``, the random ``run_id``) since when."""

    study: str
    run_id: str
    host: str
    pid: int
    started_at: datetime


class Storage(ABC):
    """The search master's results database (module docstring: lease, write discipline,
    threads).

    Every method is one transaction and raises :class:`~diel.errors.ResultsError` when the
    database fails (:class:`~diel.errors.DatabaseUnwritable` when its storage refused
    the write: a full disk or quota); a failed method has changed nothing.

    A subclass is constructed with its URL alone (``cls(url)``, by
    :func:`diel.results.get_storage`).
    """

    #: False for a store whose results end with its process (:class:`MemoryStorage`): a
    #: search on it cannot be resumed and leaves nothing to read; ``diel validate`` warns.
    durable: ClassVar[bool] = True

    @classmethod
    def check(cls, url: str) -> None:
        """Raise :class:`~diel.results.DatabaseProblem`, one line saying why and how to
        fix it, when a master could not open and write ``url``; create, write and
        connect to nothing (``diel validate`` calls it on every rank). The default
        checks nothing."""

    @property
    @abstractmethod
    def url(self) -> str:
        """Where the results are, for messages and readers (:func:`diel.results.open`
        reads a SQL one)."""

    @abstractmethod
    def acquire_lease(self, study: str) -> Lease:
        """Take the lease of study ``study`` (which need not exist yet) for this process.

        A free or stale lease is taken (a stale one with a WARNING naming its holder);
        a live one raises :class:`~diel.errors.StudyBusy` at once, whose message names
        the holder's host and pid, since when it runs and how old its heartbeat is. When
        the holder ran on this host and is gone but beat less than two periods ago, waits
        (at most two periods) for the heartbeat to age before deciding.
        """

    @abstractmethod
    def heartbeat(self, lease: Lease) -> None:
        """Move the lease's heartbeat on (call at least every :data:`HEARTBEAT_S` s).
        :class:`~diel.errors.StudyBusy` when the lease is no longer this run's (another
        run took it over after this one stalled): the caller must stop writing."""

    @abstractmethod
    def release_lease(self, lease: Lease) -> None:
        """Give the lease back (nothing happens when it is no longer this run's)."""

    @abstractmethod
    def open_study(self, name: str, strategy: str, objective: str, direction: str,
                   config: Mapping[str, Any], max_attempts: int = 2,
                   check: Callable[[StudyState], None] | None = None,
                   objectives: Sequence[ObjectiveSpec] = ()) -> StudyState:
        """Create study ``name`` with these settings, or reopen it as it is stored (its
        strategy, objectives and config are not changed here: see :meth:`rescore` and
        :meth:`update_config`); return its trials split into finished and left running.

        A study of several objectives gives every one in ``objectives``, as
        ``(expression, direction)`` pairs, the first being ``objective`` and
        ``direction`` (:class:`ValueError` otherwise); a study of one objective leaves
        ``objectives`` empty (or gives just that one).

        ``check`` is called with what is stored before anything is written; whatever it
        raises propagates and leaves the database untouched (a resume refused).

        A trial left running that was dispatched ``max_attempts`` times already (the job
        died each time) is given up, unless its last attempt made a durable
        checkpoint past the step it resumed from (it progressed): recorded ``failed``
        with :func:`crash_error` as its error and returned among the finished (and in
        ``given_up``), not run again. A ``paused`` trial is never given up. ``max_attempts`` must be an integer >= 1
        (:class:`ValueError`). Attempts still running (the job died in them) end
        ``died``, with no end time.
        """

    @abstractmethod
    def rescore(self, study_id: int, objectives: Sequence[ObjectiveSpec],
                values: Mapping[int, Sequence[float | None] | None]) -> None:
        """Set the study's objectives (``(expression, direction)`` pairs, the first
        being its objective and direction) and, in the same transaction, the values of
        each trial numbered in ``values``: one per objective, or None for none; so that
        the study is never ranked under two objectives. Trials not in ``values`` keep
        theirs (a change of direction only)."""

    @abstractmethod
    def update_config(self, study_id: int, config: Mapping[str, Any]) -> None:
        """Merge ``config`` into the stored config of the study."""

    @abstractmethod
    def record(self, study_id: int, epochs: Sequence[EpochRecord] = (),
               results: Sequence[ResultRecord] = (), starts: Sequence[TrialStart] = (),
               started: Sequence[StartedRecord] = (),
               checkpoints: Sequence[Checkpoint] = (),
               suggested: Sequence[Suggested] = ()) -> None:
        """Write trials about to start, parameters suggested as trials ran, workers'
        words that they took trials, durable checkpoints, epoch reports and results, in
        one transaction, in that order (the master commits every report of a pass
        together).

        A start is a ``running`` row with one more attempt, queued now (``queued_at``)
        and not started (``started_at`` NULL), and a new attempt (numbered 1, 2, ... a
        trial) ``running`` with its ``resumed_from``. A trial number already present (a
        trial left running or paused) reuses its row: its metrics, error and times are
        cleared, and its epochs after ``resumed_from`` are deleted, superseded by the
        new attempt's (all of them when it starts from scratch); ``epoch`` becomes
        ``resumed_from``. The row's ``params`` and ``param_key`` become the start's.

        A start adds a segment to its trial when it is the trial's first dispatch
        (``from_step`` its ``resumed_from``, else 0) or carries a ``parent_trial`` (an
        exploit: ``from_step`` its ``resumed_from``, else 0, with its parent); a trial
        dispatched again without a parent (resumed after a crash, promoted, resumed
        after a pause) adds none. Segments are numbered 0, 1, ... a trial.

        A suggested record merges its value into its trial's ``params`` (and
        ``param_key``, their canonical JSON) and into its last segment's, and its
        distribution into the trial's ``distributions``; one of a trial not recorded
        is ignored. A trial dispatched again keeps its distributions.

        A started record sets the trial's and its running attempt's ``started_at`` and
        worker (the caller keeps it from preceding ``queued_at``). A checkpoint is kept
        for its trial and step (one of the same step is replaced). An epoch overwrites
        that trial's epoch. A result sets the trial's status, metrics and end time, and
        its ``started_at`` when it carries one (a trial that started and ended between
        two commits needs no started record); a finished trial with no start recorded
        gets its ``queued_at``, so every finished trial has a start. It ends the running
        attempt with the result's status and time. A ``paused`` result is no end: the
        trial keeps no end time, and its attempt is taken back from ``attempts`` (a
        pause is not a crash), so the next dispatch is not charged for it."""

    @abstractmethod
    def forget(self, study_id: int, numbers: Sequence[int], interrupted: bool = False) -> None:
        """Take back the dispatch of trials ``numbers`` made by this run.

        Tasks taken back before any worker started them (``interrupted`` false): a first
        dispatch is deleted; a trial dispatched before (run again after a crash, or
        resumed) keeps its row, its kept epochs and its checkpoints, ``running`` with
        that attempt taken back (its attempt row deleted). Trials still running or
        queued when the run was interrupted (``interrupted`` true): every row stays
        ``running``, with this dispatch not counted, so a resume runs them again first
        under the same numbers and an interrupt is never charged as a crash; their
        attempts end ``interrupted`` (those no worker started are deleted).
        """

    @abstractmethod
    def study(self, name: str) -> dict[str, Any] | None:
        """Study ``name`` as stored: ``name``, ``strategy``, ``objective``,
        ``direction``, ``objectives`` (each ``expression`` and ``direction``, as
        :meth:`diel.results.Results.studies` lists them) and ``config``; None when there
        is no such study. A read: it writes nothing and needs no lease."""

    @abstractmethod
    def trials(self, study: str, status: str | None = None) -> list[dict[str, Any]]:
        """The trials of study ``study`` (those of ``status`` alone, when given) in number
        order, each a dict as :meth:`diel.results.Results.trials` gives it (the same keys
        in the same order; times as ISO 8601 text); ``[]`` when there is no such study. A
        read: it writes nothing and needs no lease."""

    def best(self, study: str, direction: str, top: int | None) -> list[dict[str, Any]]:
        """The ``top`` best ``ok`` trials of study ``study`` (None: every one), as
        :meth:`trials` gives them, in :func:`~diel.results.best_first`'s order for
        ``direction``: best ``objective`` first, those without a finite one last, by
        number among equals. The final report reads these alone. This default ranks
        every ok trial in Python; a database may rank and limit in its query instead."""
        from diel.results._ranking import best_first   # _ranking imports this module
        return best_first(self.trials(study, status="ok"), direction)[:top]

    @abstractmethod
    def checkpoints(self, study: str, number: int) -> list[Checkpoint]:
        """The kept (recorded, not deleted) checkpoints of trial ``number`` of study
        ``study``, newest (highest step) first; ``[]`` when there are none. A read."""

    @abstractmethod
    def study_checkpoints(self, study: str) -> list[Checkpoint]:
        """The kept checkpoints of every trial of study ``study``, by trial number, each
        trial's newest first; ``[]`` when there are none. A read (a master learns what
        earlier runs kept, to keep no more than its settings say)."""

    @abstractmethod
    def delete_checkpoints(self, study_id: int, deleted: Sequence[tuple[int, int]]) -> None:
        """Mark the checkpoints ``(trial number, step)`` of the study deleted now (their
        ``deleted_at``; the caller deletes the files after): they are no longer kept, read
        back or resumed from. Checkpoints not kept (or of no trial) are ignored."""

    @abstractmethod
    def segments(self, study: str, number: int) -> list[Segment]:
        """The segments of trial ``number`` of study ``study``, in order (see
        :meth:`record`); ``[]`` for a trial without segments or no such trial. A read."""

    @abstractmethod
    def attempts(self, study: str, number: int) -> list[dict[str, Any]]:
        """The attempts of trial ``number`` of study ``study``, in order, each a dict:
        ``attempt`` (1, 2, ...), ``resumed_from`` (a step, or None: from scratch),
        ``worker``, ``started_at`` and ``ended_at`` (ISO 8601 text, or None),
        ``status`` (:data:`~diel.results.ATTEMPT_STATUSES`); ``[]`` for no such
        trial. A read."""

    @abstractmethod
    def close(self) -> None:
        """Release the database connections (the lease is released by its own call)."""
