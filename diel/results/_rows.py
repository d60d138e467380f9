"""A study's and a trial's row, whatever holds it: how values are stored, and what a row
is given back as (:class:`~diel.results.StoredTrial` and :class:`StudyState` to the
master, a plain dict to readers).

Both storages (SQL and in memory) keep the same columns under the same names (see
:mod:`diel.results._tables`) and go through these functions, so that they store and
give back the same things: a metric that is not a finite number is stored as None (JSON
has no NaN), a study of one objective stores no ``objectives`` list, a trial dict has
the same keys in the same order. No SQLAlchemy here.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Callable, Mapping, Sequence

from diel.errors import ResultsError
from diel.results._leases import as_utc
from diel.results._objectives import study_objectives
from diel.results._status import FINISHED
from diel.results._storage import Checkpoint, ObjectiveSpec, Segment, StoredTrial, \
    StudyState, Suggested, TrialStart, crash_error

__all__ = ["json_metrics", "json_values", "objective_specs", "stored_specs", "stored_trial",
           "study_state", "study_dict", "trial_dict", "attempt_dict", "checkpoint_of",
           "is_spent", "iso_or_none", "segments_of", "new_segment", "merged_suggestions",
           "canonical_key", "VALUES"]

VALUES = "objective_values"   # the trial field of a study of several objectives (schema 4)


def json_metrics(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """Metrics as stored in JSON: a float that is not finite (a diverged trial's NaN) is
    None, since JSON has no NaN: PostgreSQL refuses it and SQLite's JSON functions (the
    ``--where`` filters) fail on it."""
    return {key: None if isinstance(value, float) and not math.isfinite(value) else value
            for key, value in metrics.items()}


def json_values(values: Sequence[float | None] | None) -> list[float | None] | None:
    """Objective values as stored in JSON: a value that is not a finite number is None
    (JSON has no NaN, and PostgreSQL refuses it)."""
    if values is None:
        return None
    return [float(v) if isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(v) else None for v in values]


def objective_specs(objective: str, direction: str,
                    objectives: Sequence[ObjectiveSpec]) -> tuple[ObjectiveSpec, ...]:
    """A new study's objectives as pairs; :class:`ValueError` when ``objectives`` does
    not start with ``objective`` and ``direction``."""
    specs = tuple((str(text), str(way)) for text, way in objectives) or \
        ((objective, direction),)
    if specs[0] != (objective, direction):
        raise ValueError(f"the first of objectives {specs!r} must be the objective "
                         f"{objective!r} ({direction})")
    return specs


def rescored_specs(objectives: Sequence[ObjectiveSpec]) -> tuple[ObjectiveSpec, ...]:
    """The objectives a study is rescored to, as pairs; :class:`ValueError` for none."""
    specs = tuple((str(text), str(way)) for text, way in objectives)
    if not specs:
        raise ValueError("a study needs at least one objective")
    return specs


def stored_specs(specs: Sequence[ObjectiveSpec]) -> list[dict[str, str]] | None:
    """``studies.objectives`` for these objectives: NULL for one."""
    if len(specs) < 2:
        return None
    return [{"expression": text, "direction": way} for text, way in specs]


def stored_trial(row: Any, epochs: dict[int, dict[str, Any]],
                 checkpoints: Sequence[Checkpoint] = (),
                 segments: Sequence[Segment] = ()) -> StoredTrial:
    """A trial row (``number``, ``params``, ``status``, ``metrics``, ``distributions``,
    ... attributes), its ``epochs``, kept ``checkpoints`` (newest first) and
    ``segments`` as the master gets them back."""
    values = {"accuracy": row.accuracy, "loss": row.loss, "time": row.time,
              "epoch": row.epoch, **(row.metrics or {})}
    scores = tuple(row.objective_values) if row.objective_values is not None else None
    return StoredTrial(row.number, dict(row.params or {}), row.param_key, row.status,
                       row.objective, {k: v for k, v in values.items() if v is not None}, epochs,
                       row.attempts, row.error, scores, tuple(checkpoints), tuple(segments),
                       dict(row.distributions or {}))


def check_max_attempts(max_attempts: Any) -> None:
    """:class:`ValueError` unless ``max_attempts`` (of :meth:`Storage.open_study`) is an
    integer >= 1."""
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise ValueError(f"max_attempts must be an integer >= 1, got {max_attempts!r}")


def is_spent(row: Any, max_attempts: int, resumed_from: int | None = None,
             newest_checkpoint: int | None = None) -> bool:
    """Whether a trial row is to be given up when its study is opened: left ``running``
    (the job died while it ran) after ``max_attempts`` dispatches, its last one
    (resumed from step ``resumed_from``, None: from scratch) without a durable
    checkpoint newer than the one it resumed from (``newest_checkpoint``: the step of
    the trial's newest kept checkpoint). A trial that made progress is resumed however
    often the job died, as each attempt brings it nearer its end; one that crashes the
    job before its first new checkpoint each time is given up. A ``paused`` trial never
    is: it stopped on request."""
    if row.status != "running" or row.attempts < max_attempts:
        return False
    return newest_checkpoint is None or newest_checkpoint <= (resumed_from or 0)


def study_state(study: Any, rows: Sequence[Any], spent: Sequence[Any],
                epochs_of: Callable[[Any], dict[int, dict[str, Any]]],
                checkpoints_of: Callable[[Any], Sequence[Checkpoint]],
                segments_of_row: Callable[[Any], Sequence[Segment]]) -> StudyState:
    """The stored study (a row with ``id``, ``config``, ``strategy``, ``objective``,
    ``direction``, ``objectives``) and its trial ``rows``, as :meth:`Storage.open_study`
    returns them: trials in ``spent`` as they are about to be recorded (failed, given
    up); ``epochs_of(row)`` gives a trial's epochs, ``checkpoints_of(row)`` the kept
    checkpoints of a trial not finished, newest first, ``segments_of_row(row)`` its
    segments."""
    spent_numbers = {row.number for row in spent}
    finished, running, given_up = [], [], []
    for row in rows:
        if row.number in spent_numbers:
            stored = dataclasses.replace(
                stored_trial(row, epochs_of(row), (), segments_of_row(row)), status="failed",
                error=crash_error(row.attempts))
            given_up.append(stored)
            finished.append(stored)
        elif row.status in FINISHED:
            finished.append(stored_trial(row, epochs_of(row), (), segments_of_row(row)))
        else:
            running.append(stored_trial(row, epochs_of(row), checkpoints_of(row),
                                        segments_of_row(row)))
    specs = study_objectives(study.objective, study.direction, study.objectives)
    return StudyState(study.id, finished, running, dict(study.config or {}), given_up,
                      study.strategy, study.objective, study.direction, specs)


def canonical_key(params: Mapping[str, Any]) -> str:
    """The ``param_key`` of ``params``: their canonical JSON (sorted keys), as the search
    computes it (diel.search.space.param_key; diel.results imports no other part of
    diel). A value JSON cannot hold is a :class:`ResultsError`, as a database refuses
    it."""
    try:
        return json.dumps(params, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ResultsError(f"parameters {sorted(params)} cannot be stored: {e}") from e


def new_segment(start: TrialStart, present: bool) -> tuple[int, int | None, int | None] | None:
    """The segment a start adds to its trial (``present``: the trial has a row already),
    as ``(from_step, parent_trial, parent_step)``; None when it adds none (a trial
    dispatched again without a parent). See :meth:`Storage.record`."""
    if present and start.parent_trial is None:
        return None
    return start.resumed_from or 0, start.parent_trial, start.parent_step


def merged_suggestions(params: Mapping[str, Any], distributions: Mapping[str, Any] | None,
                       suggested: Sequence[Suggested]
                       ) -> tuple[dict[str, Any], dict[str, Any]]:
    """A trial's ``params`` and ``distributions`` with ``suggested`` (its records, in
    order) merged in: the last value and distribution of a name win."""
    params, distributions = dict(params), dict(distributions or {})
    for record in suggested:
        params[record.name] = record.value
        distributions[record.name] = dict(record.distribution)
    return params, distributions


def segments_of(number: int, rows: Sequence[Any], last_epoch: int | None) -> list[Segment]:
    """Trial ``number``'s segment rows (``index``, ``from_step``, ``params``,
    ``parent_trial``, ``parent_step`` attributes, in index order) as segments: each ends
    where the next begins, the last at the trial's ``last_epoch`` reached."""
    ends = [row.from_step for row in rows[1:]] + [last_epoch]
    return [Segment(number, row.index, row.from_step, end, dict(row.params or {}),
                    row.parent_trial, row.parent_step) for row, end in zip(rows, ends)]


def study_dict(study: Any) -> dict[str, Any]:
    """A study row as :meth:`Storage.study` gives it."""
    specs = study_objectives(study.objective, study.direction, study.objectives)
    return {"name": study.name, "strategy": study.strategy, "objective": study.objective,
            "direction": study.direction,
            "objectives": [{"expression": text, "direction": way} for text, way in specs],
            "config": dict(study.config or {})}


def checkpoint_of(row: Any, number: int) -> Checkpoint:
    """A checkpoint row (``step``, ``path``, ``nbytes``, ``checksum``, ``created_at``) of
    trial ``number``."""
    return Checkpoint(number, row.step, row.path, row.nbytes, row.checksum,
                      as_utc(row.created_at))


def attempt_dict(row: Any) -> dict[str, Any]:
    """An attempt row as :meth:`Storage.attempts` gives it."""
    return {"attempt": row.attempt, "resumed_from": row.resumed_from, "worker": row.worker,
            "started_at": iso_or_none(row.started_at), "ended_at": iso_or_none(row.ended_at),
            "status": row.status}


def iso_or_none(value: Any) -> str | None:
    """A timestamp as ISO 8601 text, None as None (JSON has no datetime)."""
    return value.isoformat() if value is not None else None


def trial_dict(row: Mapping[str, Any], specs: Sequence[ObjectiveSpec]) -> dict[str, Any]:
    """One trial row (its fields and ``study``, the study's name) as the dict
    :meth:`Results.trials` returns (``attempts`` after ``worker``, when the schema has
    it; ``objectives`` after ``objective`` for a trial of a study of several,
    ``specs``)."""
    out = {"study": row["study"], "number": row["number"], "status": row["status"],
           "objective": row["objective"]}
    if len(specs) > 1:
        values = row.get(VALUES) or []
        out["objectives"] = {text: values[i] if i < len(values) else None
                             for i, (text, _) in enumerate(specs)}
    out.update({"accuracy": row["accuracy"], "loss": row["loss"], "time": row["time"],
                "epoch": row["epoch"], "worker": row["worker"]})
    if "attempts" in row:
        out["attempts"] = row["attempts"]
    out.update({"params": dict(row["params"] or {}), "metrics": dict(row["metrics"] or {})})
    if "queued_at" in row:
        out["queued_at"] = iso_or_none(row["queued_at"])
    out.update({"started_at": iso_or_none(row["started_at"]),
                "finished_at": iso_or_none(row["finished_at"]), "error": row["error"]})
    return out
