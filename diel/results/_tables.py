"""The results schema, its one definition: a SQLAlchemy Core table each (studies, trials,
trial metrics, checkpoints, attempts, segments, study leases, and ``diel_meta``, which
records the schema version; see :mod:`diel.results._schema`).

The search master's store (:mod:`diel.results._store`) writes and reads these tables
with Core statements alone, so the master never imports ``sqlalchemy.orm`` (some 0.07 s
of CPU, on the critical path of a short search); the readers' ORM classes
(:mod:`diel.results._models`) are mapped onto the same tables.
"""

from __future__ import annotations

from sqlalchemy import JSON, BigInteger, Column, DateTime, Float, ForeignKey, Index, Integer, \
    MetaData, String, Table, Text, UniqueConstraint, text

from diel.results._storage import utcnow

__all__ = ["METADATA", "STUDIES", "TRIALS", "TRIAL_METRICS", "CHECKPOINTS", "ATTEMPTS",
           "SEGMENTS", "STUDY_LEASES", "META", "SCHEMA_VERSION"]


# The schema this code writes. 1: the first release (no diel_meta table, no
# trials.attempts); 2: trials.attempts and diel_meta; 3: the study_leases table; 4:
# studies.objectives and trials.objective_values (studies with several objectives); 5:
# trials.queued_at (started_at became the time a worker took the trial); 6: the
# checkpoints and attempts tables, and the trial status ``paused``; 7: the segments table
# and trials.distributions. Bump it with every
# change of the tables and teach diel.results._schema to upgrade every version before.
SCHEMA_VERSION = 7

METADATA = MetaData()
_AT = DateTime(timezone=True)


def _trial_id() -> Column:
    """The column of a trial's row id in the tables of its parts."""
    return Column("trial_id", Integer, ForeignKey("trials.id", ondelete="CASCADE"),
                  nullable=False)


# One search: its name (unique), how it searches and what it optimizes. ``objective``
# and ``direction`` are the study's objective, or with several objectives the first
# one's (the one ``diel results`` ranks by unless told otherwise); ``objectives`` lists
# every objective as ``{"expression": ..., "direction": ...}`` when there are several,
# and is NULL for a study of one objective (schema 4).
STUDIES = Table(
    "studies", METADATA,
    Column("id", Integer, primary_key=True),
    Column("name", String(255), unique=True, nullable=False),
    Column("strategy", String(32), nullable=False),
    Column("objective", Text, nullable=False),
    Column("direction", String(16), nullable=False),
    Column("objectives", JSON(none_as_null=True)),
    Column("config", JSON, default=dict, nullable=False),
    Column("created_at", _AT, default=utcnow, nullable=False),
    Column("updated_at", _AT, default=utcnow, onupdate=utcnow, nullable=False))

# One parameter set tried: its params, outcome, metrics and where and when it ran.
# ``param_key`` is the canonical JSON of ``params`` (the trial's identity for resume).
# ``epoch`` is the last epoch reached (the one a pruned trial stopped at). ``status`` is
# one of diel.results._status.STATUSES (``paused``: stopped with its progress in a
# checkpoint, to be resumed; schema 6). ``attempts`` is how many times the trial was
# dispatched: 1 when first written, one more each time a trial left ``running`` by a
# crash is run again (schema 2; databases of schema 1 lack the column until the master
# upgrades them); an interrupted or paused dispatch is not counted (each dispatch has its
# row in ``attempts``, schema 6). ``objective_values`` holds, in a study of several
# objectives, the trial's value of each, in the study's order (None where one could not
# be computed); ``objective`` is then the first of them. NULL in a study of one objective
# (schema 4). ``queued_at`` is when the master dispatched the trial (put its task in the
# queue) and ``started_at`` when a worker took it and began to run it, NULL while it
# waits in the queue (schema 5; before, ``started_at`` was the dispatch time, which the
# upgrade copies into ``queued_at``). ``params`` are the trial's current parameters (a
# trial whose parameters changed as it ran has the sets before in ``segments``);
# ``distributions`` holds, by name, the distribution of each parameter its function
# asked for as it ran (define-by-run), in diel's JSON form; NULL when there is none
# (schema 7).
TRIALS = Table(
    "trials", METADATA,
    Column("id", Integer, primary_key=True),
    Column("study_id", Integer, ForeignKey("studies.id", ondelete="CASCADE"), nullable=False),
    Column("number", Integer, nullable=False),
    Column("params", JSON, default=dict, nullable=False),
    Column("param_key", Text, nullable=False),
    Column("distributions", JSON(none_as_null=True)),
    Column("status", String(16), default="running", nullable=False),
    Column("objective", Float),
    Column("objective_values", JSON(none_as_null=True)),
    Column("time", Float),
    Column("accuracy", Float),
    Column("loss", Float),
    Column("metrics", JSON, default=dict, nullable=False),
    Column("worker", Integer),
    Column("epoch", Integer),
    Column("queued_at", _AT),
    Column("started_at", _AT),
    Column("finished_at", _AT),
    Column("error", Text),
    Column("attempts", Integer, default=1, server_default=text("1"), nullable=False),
    UniqueConstraint("study_id", "number"),
    Index("ix_trials_study_param_key", "study_id", "param_key"),
    Index("ix_trials_study_status", "study_id", "status"))

# The metrics a trial reported after one epoch.
TRIAL_METRICS = Table(
    "trial_metrics", METADATA,
    Column("id", Integer, primary_key=True),
    _trial_id(),
    Column("epoch", Integer, nullable=False),
    Column("metrics", JSON, default=dict, nullable=False),
    Column("reported_at", _AT, default=utcnow, nullable=False),
    UniqueConstraint("trial_id", "epoch"))

# A durable checkpoint of a trial (schema 6): its state as of ``step``, in the file
# ``path`` (``nbytes`` bytes, ``checksum`` naming its algorithm), recorded once the file
# was written and synced (``created_at``); ``deleted_at`` is set when the file is deleted
# (NULL while it is kept). One a trial and step: a later one replaces it.
CHECKPOINTS = Table(
    "checkpoints", METADATA,
    Column("id", Integer, primary_key=True),
    _trial_id(),
    Column("step", Integer, nullable=False),
    Column("nbytes", BigInteger, nullable=False),
    Column("checksum", String(255), nullable=False),
    Column("path", Text, nullable=False),
    Column("created_at", _AT, default=utcnow, nullable=False),
    Column("deleted_at", _AT),
    UniqueConstraint("trial_id", "step"))

# One dispatch of a trial (schema 6): ``attempt`` counts them a trial (1, 2, ...);
# ``resumed_from`` is the step of the checkpoint it resumed from (NULL: from scratch);
# ``worker`` and ``started_at`` are the worker copy that took it and when (NULL while
# queued); ``ended_at`` and ``status`` how it ended (``running`` until then; see
# diel.results._status: ``died`` has no end time).
ATTEMPTS = Table(
    "attempts", METADATA,
    Column("id", Integer, primary_key=True),
    _trial_id(),
    Column("attempt", Integer, nullable=False),
    Column("resumed_from", Integer),
    Column("worker", Integer),
    Column("started_at", _AT),
    Column("ended_at", _AT),
    Column("status", String(16), default="running", nullable=False),
    UniqueConstraint("trial_id", "attempt"))

# One parameter set a trial ran with (schema 7): the ``index``-th (0, 1, ...) a trial, in
# effect from step ``from_step`` (0: from scratch) until the next one's, with ``params``;
# ``parent_trial`` (a trial *number* of the same study) and ``parent_step`` name the
# checkpoint it was copied from (NULL: the trial's own run), as population-based
# training's exploit does. Written with the dispatch that began it (``created_at``).
SEGMENTS = Table(
    "segments", METADATA,
    Column("id", Integer, primary_key=True),
    _trial_id(),
    Column("index", Integer, nullable=False),
    Column("from_step", Integer, nullable=False),
    Column("params", JSON, default=dict, nullable=False),
    Column("parent_trial", Integer),
    Column("parent_step", Integer),
    Column("created_at", _AT, default=utcnow, nullable=False),
    UniqueConstraint("trial_id", "index"))

# The run that holds a study now: at most one row a study, keyed by the study's name (a
# lease is taken before the study's row exists), deleted when the run ends. ``run_id``
# is random per run, so a run can tell its own lease from a later holder's; ``host`` and
# ``pid`` say where the holding master runs; ``heartbeat_at`` is moved on every few
# seconds while it runs (see diel.results._storage). Schema 3.
STUDY_LEASES = Table(
    "study_leases", METADATA,
    Column("study", String(255), primary_key=True),
    Column("run_id", String(64), nullable=False),
    Column("host", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("started_at", _AT, nullable=False),
    Column("heartbeat_at", _AT, nullable=False))

# Facts about the database itself, as text key/value pairs; ``schema_version`` is the
# schema the tables follow (no row, or no table: schema 1).
META = Table(
    "diel_meta", METADATA,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False))
