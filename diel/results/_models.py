"""The results schema: one SQLAlchemy model a table (studies, trials, trial metrics,
checkpoints, attempts, segments, study leases, and ``diel_meta``, which records the schema version;
see :mod:`diel.results._schema`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, DateTime, Float, ForeignKey, Index, Integer, String, \
    Text, UniqueConstraint, text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from diel.results._status import FINISHED, STATUSES
from diel.results._storage import utcnow

__all__ = ["Base", "StudyModel", "TrialModel", "TrialMetricModel", "CheckpointModel",
           "AttemptModel", "SegmentModel", "LeaseModel", "MetaModel", "utcnow", "STATUSES",
           "FINISHED",
           "SCHEMA_VERSION"]


# The schema this code writes. 1: the first release (no diel_meta table, no
# trials.attempts); 2: trials.attempts and diel_meta; 3: the study_leases table; 4:
# studies.objectives and trials.objective_values (studies with several objectives); 5:
# trials.queued_at (started_at became the time a worker took the trial); 6: the
# checkpoints and attempts tables, and the trial status ``paused``; 7: the segments table
# and trials.distributions. Bump it with every
# change of the tables and teach diel.results._schema to upgrade every version before.
SCHEMA_VERSION = 7


class Base(DeclarativeBase):
    """Declarative base of the results tables."""

    type_annotation_map = {dict[str, Any]: JSON}


class StudyModel(Base):
    """One search: its name (unique), how it searches and what it optimizes.

    ``objective`` and ``direction`` are the study's objective, or with several objectives
    the first one's (the one ``diel results`` ranks by unless told otherwise);
    ``objectives`` lists every objective as ``{"expression": ..., "direction": ...}``
    when there are several, and is NULL for a study of one objective (schema 4).
    """

    __tablename__ = "studies"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    strategy: Mapped[str] = mapped_column(String(32))
    objective: Mapped[str] = mapped_column(Text)
    direction: Mapped[str] = mapped_column(String(16))
    objectives: Mapped[list[dict[str, str]] | None] = mapped_column(JSON(none_as_null=True))
    config: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow,
                                                 onupdate=utcnow)

    trials: Mapped[list[TrialModel]] = relationship(back_populates="study",
                                                    cascade="all, delete-orphan")


class TrialModel(Base):
    """One parameter set tried: its params, outcome, metrics and where and when it ran.

    ``param_key`` is the canonical JSON of ``params`` (the trial's identity for resume).
    ``epoch`` is the last epoch reached (the one a pruned trial stopped at).
    ``status`` is one of :data:`STATUSES` (``paused``: stopped with its progress in a
    checkpoint, to be resumed; schema 6).
    ``attempts`` is how many times the trial was dispatched: 1 when first written, one
    more each time a trial left ``running`` by a crash is run again (schema 2; databases
    of schema 1 lack the column until the master upgrades them); an interrupted or paused
    dispatch is not counted (each dispatch has its row in ``attempts``, schema 6).
    ``objective_values`` holds, in a study of several objectives, the trial's value of
    each, in the study's order (None where one could not be computed); ``objective`` is
    then the first of them. NULL in a study of one objective (schema 4).
    ``queued_at`` is when the master dispatched the trial (put its task in the queue) and
    ``started_at`` when a worker took it and began to run it, NULL while it waits in the
    queue (schema 5; before, ``started_at`` was the dispatch time, which the upgrade
    copies into ``queued_at``).
    ``params`` are the trial's current parameters (a trial whose parameters changed as
    it ran has the sets before in ``segments``); ``distributions`` holds, by name, the
    distribution of each parameter its function asked for as it ran (define-by-run), in
    diel's JSON form; NULL when there is none (schema 7).
    """

    __tablename__ = "trials"
    __table_args__ = (UniqueConstraint("study_id", "number"),
                      Index("ix_trials_study_param_key", "study_id", "param_key"),
                      Index("ix_trials_study_status", "study_id", "status"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    params: Mapped[dict[str, Any]] = mapped_column(default=dict)
    param_key: Mapped[str] = mapped_column(Text)
    distributions: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    status: Mapped[str] = mapped_column(String(16), default="running")
    objective: Mapped[float | None] = mapped_column(Float)
    objective_values: Mapped[list[float | None] | None] = mapped_column(
        JSON(none_as_null=True))
    time: Mapped[float | None] = mapped_column(Float)
    accuracy: Mapped[float | None] = mapped_column(Float)
    loss: Mapped[float | None] = mapped_column(Float)
    metrics: Mapped[dict[str, Any]] = mapped_column(default=dict)
    worker: Mapped[int | None] = mapped_column(Integer)
    epoch: Mapped[int | None] = mapped_column(Integer)
    queued_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    error: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, default=1, server_default=text("1"))

    study: Mapped[StudyModel] = relationship(back_populates="trials")
    epochs: Mapped[list[TrialMetricModel]] = relationship(back_populates="trial",
                                                          cascade="all, delete-orphan")


class TrialMetricModel(Base):
    """The metrics a trial reported after one epoch."""

    __tablename__ = "trial_metrics"
    __table_args__ = (UniqueConstraint("trial_id", "epoch"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"))
    epoch: Mapped[int] = mapped_column(Integer)
    metrics: Mapped[dict[str, Any]] = mapped_column(default=dict)
    reported_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    trial: Mapped[TrialModel] = relationship(back_populates="epochs")


class CheckpointModel(Base):
    """A durable checkpoint of a trial (schema 6): its state as of ``step``, in the file
    ``path`` (``nbytes`` bytes, ``checksum`` naming its algorithm), recorded once the
    file was written and synced (``created_at``); ``deleted_at`` is set when the file is
    deleted (NULL while it is kept). One a trial and step: a later one replaces it."""

    __tablename__ = "checkpoints"
    __table_args__ = (UniqueConstraint("trial_id", "step"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"))
    step: Mapped[int] = mapped_column(Integer)
    nbytes: Mapped[int] = mapped_column(BigInteger)
    checksum: Mapped[str] = mapped_column(String(255))
    path: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class AttemptModel(Base):
    """One dispatch of a trial (schema 6): ``attempt`` counts them a trial (1, 2, ...);
    ``resumed_from`` is the step of the checkpoint it resumed from (NULL: from scratch);
    ``worker`` and ``started_at`` are the worker copy that took it and when (NULL while
    queued); ``ended_at`` and ``status`` how it ended (``running`` until then; see
    :mod:`diel.results._status`: ``died`` has no end time)."""

    __tablename__ = "attempts"
    __table_args__ = (UniqueConstraint("trial_id", "attempt"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"))
    attempt: Mapped[int] = mapped_column(Integer)
    resumed_from: Mapped[int | None] = mapped_column(Integer)
    worker: Mapped[int | None] = mapped_column(Integer)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    status: Mapped[str] = mapped_column(String(16), default="running")


class SegmentModel(Base):
    """One parameter set a trial ran with (schema 7): the ``index``-th (0, 1, ...) a
    trial, in effect from step ``from_step`` (0: from scratch) until the next one's,
    with ``params``; ``parent_trial`` (a trial *number* of the same study) and
    ``parent_step`` name the checkpoint it was copied from (NULL: the trial's own run),
    as population-based training's exploit does. Written with the dispatch that began
    it (``created_at``)."""

    __tablename__ = "segments"
    __table_args__ = (UniqueConstraint("trial_id", "index"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"))
    index: Mapped[int] = mapped_column(Integer)
    from_step: Mapped[int] = mapped_column(Integer)
    params: Mapped[dict[str, Any]] = mapped_column(default=dict)
    parent_trial: Mapped[int | None] = mapped_column(Integer)
    parent_step: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class LeaseModel(Base):
    """The run that holds a study now: at most one row a study, keyed by the study's name
    (a lease is taken before the study's row exists), deleted when the run ends.

    ``run_id`` is random per run, so a run can tell its own lease from a later holder's;
    ``host`` and ``pid`` say where the holding master runs; ``heartbeat_at`` is moved on
    every few seconds while it runs (see :mod:`diel.results._storage`). Schema 3.
    """

    __tablename__ = "study_leases"

    study: Mapped[str] = mapped_column(String(255), primary_key=True)
    run_id: Mapped[str] = mapped_column(String(64))
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    heartbeat_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class MetaModel(Base):
    """Facts about the database itself, as text key/value pairs; ``schema_version`` is
    the schema the tables follow (no row, or no table: schema 1)."""

    __tablename__ = "diel_meta"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)
