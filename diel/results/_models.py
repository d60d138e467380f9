"""The readers' ORM classes of the results tables: one a table of
:mod:`diel.results._tables` (the schema's one definition, which describes the columns),
with the relationships between them. The search master's store uses the tables alone and
never imports this module (nor ``sqlalchemy.orm``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.orm import DeclarativeBase, Mapped, relationship

from diel.results._status import FINISHED, STATUSES
from diel.results._storage import utcnow
from diel.results._tables import ATTEMPTS, CHECKPOINTS, META, METADATA, SCHEMA_VERSION, \
    SEGMENTS, STUDIES, STUDY_LEASES, TRIAL_METRICS, TRIALS

__all__ = ["Base", "StudyModel", "TrialModel", "TrialMetricModel", "CheckpointModel",
           "AttemptModel", "SegmentModel", "LeaseModel", "MetaModel", "utcnow", "STATUSES",
           "FINISHED",
           "SCHEMA_VERSION"]


class Base(DeclarativeBase):
    """Declarative base of the results tables (their metadata is the schema's)."""

    metadata = METADATA


class StudyModel(Base):
    """One search (table ``studies``)."""

    __table__ = STUDIES

    id: Mapped[int]
    name: Mapped[str]
    strategy: Mapped[str]
    objective: Mapped[str]
    direction: Mapped[str]
    objectives: Mapped[list[dict[str, str]] | None]
    config: Mapped[dict[str, Any]]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]

    trials: Mapped[list[TrialModel]] = relationship(back_populates="study",
                                                    cascade="all, delete-orphan")


class TrialModel(Base):
    """One parameter set tried (table ``trials``)."""

    __table__ = TRIALS

    id: Mapped[int]
    study_id: Mapped[int]
    number: Mapped[int]
    params: Mapped[dict[str, Any]]
    param_key: Mapped[str]
    distributions: Mapped[dict[str, Any] | None]
    status: Mapped[str]
    objective: Mapped[float | None]
    objective_values: Mapped[list[float | None] | None]
    time: Mapped[float | None]
    accuracy: Mapped[float | None]
    loss: Mapped[float | None]
    metrics: Mapped[dict[str, Any]]
    worker: Mapped[int | None]
    epoch: Mapped[int | None]
    queued_at: Mapped[datetime | None]
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    error: Mapped[str | None]
    attempts: Mapped[int]

    study: Mapped[StudyModel] = relationship(back_populates="trials")
    epochs: Mapped[list[TrialMetricModel]] = relationship(back_populates="trial",
                                                          cascade="all, delete-orphan")


class TrialMetricModel(Base):
    """The metrics a trial reported after one epoch (table ``trial_metrics``)."""

    __table__ = TRIAL_METRICS

    id: Mapped[int]
    trial_id: Mapped[int]
    epoch: Mapped[int]
    metrics: Mapped[dict[str, Any]]
    reported_at: Mapped[datetime]

    trial: Mapped[TrialModel] = relationship(back_populates="epochs")


class CheckpointModel(Base):
    """A durable checkpoint of a trial (table ``checkpoints``, schema 6)."""

    __table__ = CHECKPOINTS

    id: Mapped[int]
    trial_id: Mapped[int]
    step: Mapped[int]
    nbytes: Mapped[int]
    checksum: Mapped[str]
    path: Mapped[str]
    created_at: Mapped[datetime]
    deleted_at: Mapped[datetime | None]


class AttemptModel(Base):
    """One dispatch of a trial (table ``attempts``, schema 6)."""

    __table__ = ATTEMPTS

    id: Mapped[int]
    trial_id: Mapped[int]
    attempt: Mapped[int]
    resumed_from: Mapped[int | None]
    worker: Mapped[int | None]
    started_at: Mapped[datetime | None]
    ended_at: Mapped[datetime | None]
    status: Mapped[str]


class SegmentModel(Base):
    """One parameter set a trial ran with (table ``segments``, schema 7)."""

    __table__ = SEGMENTS

    id: Mapped[int]
    trial_id: Mapped[int]
    index: Mapped[int]
    from_step: Mapped[int]
    params: Mapped[dict[str, Any]]
    parent_trial: Mapped[int | None]
    parent_step: Mapped[int | None]
    created_at: Mapped[datetime]


class LeaseModel(Base):
    """The run that holds a study now (table ``study_leases``, schema 3)."""

    __table__ = STUDY_LEASES

    study: Mapped[str]
    run_id: Mapped[str]
    host: Mapped[str]
    pid: Mapped[int]
    started_at: Mapped[datetime]
    heartbeat_at: Mapped[datetime]


class MetaModel(Base):
    """Facts about the database itself (table ``diel_meta``)."""

    __table__ = META

    key: Mapped[str]
    value: Mapped[str]
