"""The in-memory implementation of :class:`~diel.results.Storage`: ``memory://``.

Everything lives in this object, in this process, and is gone with it: a search on it
prints its report and leaves nothing behind (no resume, nothing for ``diel results`` to
read). It is for tests and benchmarks of what is not the SQL store: the search master's
tests run on it, and the storage conformance suite (:mod:`diel.testing.storages`) holds
it to the same contract as the SQL store, with which it shares how rows are stored and
given back (:mod:`diel.results._rows`) and how leases are judged
(:mod:`diel.results._leases`). Each ``get_storage("memory://")`` is a new, empty store;
share one by passing the object itself.

Every method runs under one lock and changes nothing when it raises, so threads may
read while the master writes. Values are stored as JSON would keep them (copied, a
tuple as a list, a NaN metric as None), so that nothing the caller keeps aliases the
store, and what is not JSON is refused as a database refuses it.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Callable, Mapping, Sequence

from diel.errors import ResultsError
from diel.results._leases import Holder, acquire, decide, lost
from diel.results._rows import attempt_dict, canonical_key, check_max_attempts, is_spent, \
    json_metrics, json_values, merged_suggestions, new_segment, objective_specs, \
    rescored_specs, segments_of, stored_specs, study_dict, study_state, trial_dict
from diel.results._objectives import study_objectives
from diel.results._storage import Checkpoint, EpochRecord, Lease, ObjectiveSpec, ResultRecord, \
    Segment, StartedRecord, Storage, StudyState, Suggested, TrialStart, crash_error, utcnow

__all__ = ["MemoryStorage"]


@dataclass
class _Attempt:
    """An attempt's row, with the columns of the SQL store's."""

    attempt: int
    resumed_from: int | None
    worker: int | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    status: str = "running"


@dataclass
class _Segment:
    """A segment's row, with the columns of the SQL store's."""

    index: int
    from_step: int
    params: dict[str, Any]
    parent_trial: int | None
    parent_step: int | None
    created_at: datetime


@dataclass
class _Trial:
    """A trial's row, with the columns of the SQL store's (:mod:`diel.results._tables`),
    its epochs, its kept checkpoints by step, its attempts and its segments in order."""

    number: int
    params: dict[str, Any]
    param_key: str
    queued_at: datetime
    status: str = "running"
    objective: float | None = None
    objective_values: list[float | None] | None = None
    time: float | None = None
    accuracy: float | None = None
    loss: float | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    worker: int | None = None
    epoch: int | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    error: str | None = None
    attempts: int = 1
    distributions: dict[str, Any] | None = None
    epochs: dict[int, dict[str, Any]] = field(default_factory=dict)
    checkpoints: dict[int, Checkpoint] = field(default_factory=dict)
    runs: list[_Attempt] = field(default_factory=list)
    segments: list[_Segment] = field(default_factory=list)

    @property
    def running(self) -> _Attempt | None:
        """The attempt not ended yet (None: none)."""
        return next((run for run in self.runs if run.status == "running"), None)

    def kept(self) -> list[Checkpoint]:
        """Its checkpoints, newest first."""
        return [self.checkpoints[step] for step in sorted(self.checkpoints, reverse=True)]

    def stretches(self) -> list[Segment]:
        """Its segments, as readers get them."""
        return segments_of(self.number, self.segments, self.epoch)


@dataclass
class _Study:
    """A study's row and its trials by number."""

    id: int
    name: str
    strategy: str
    objective: str
    direction: str
    objectives: list[dict[str, str]] | None
    config: dict[str, Any]
    trials: dict[int, _Trial] = field(default_factory=dict)


@dataclass(frozen=True)
class _LeaseRow:
    lease: Lease
    heartbeat_at: datetime


class MemoryStorage(Storage):
    """The :class:`Storage` contract in this process's memory (module docstring)."""

    durable = False

    def __init__(self, url: str = "memory://") -> None:
        self._url = url
        self._lock = threading.RLock()
        self._studies: dict[str, _Study] = {}
        self._leases: dict[str, _LeaseRow] = {}

    @property
    def url(self) -> str:
        return self._url

    # -- the lease -----------------------------------------------------------------
    def acquire_lease(self, study: str) -> Lease:
        return acquire(study, self._take)

    def _take(self, lease: Lease) -> Holder | None:
        now = utcnow()
        with self._lock:
            row = self._leases.get(lease.study)
            holder = None if row is None else decide(lease.study, _holder(row, now))
            if holder is None:
                self._leases[lease.study] = _LeaseRow(lease, now)
            return holder

    def heartbeat(self, lease: Lease) -> None:
        now = utcnow()
        with self._lock:
            row = self._leases.get(lease.study)
            if row is None or row.lease.run_id != lease.run_id:
                raise lost(lease.study, None if row is None else _holder(row, now))
            self._leases[lease.study] = replace(row, heartbeat_at=now)

    def release_lease(self, lease: Lease) -> None:
        with self._lock:
            row = self._leases.get(lease.study)
            if row is not None and row.lease.run_id == lease.run_id:
                del self._leases[lease.study]

    # -- the study -----------------------------------------------------------------
    def open_study(self, name: str, strategy: str, objective: str, direction: str,
                   config: Mapping[str, Any], max_attempts: int = 2,
                   check: Callable[[StudyState], None] | None = None,
                   objectives: Sequence[ObjectiveSpec] = ()) -> StudyState:
        check_max_attempts(max_attempts)
        specs = objective_specs(objective, direction, objectives)
        with self._lock:
            study = self._studies.get(name)
            if study is None:
                study = _Study(len(self._studies) + 1, name, strategy, objective, direction,
                               stored_specs(specs), _json(dict(config)))
                self._studies[name] = study
                return StudyState(study.id, [], [], _json(study.config), [], strategy,
                                  objective, direction, specs)
            rows = [_copy(row) for _, row in sorted(study.trials.items())]
            spent = [row for row in rows if is_spent(
                row, max_attempts, row.runs[-1].resumed_from if row.runs else None,
                row.kept()[0].step if row.kept() else None)]
            state = study_state(_copy(study), rows, spent, lambda row: row.epochs,
                                lambda row: row.kept(), lambda row: row.stretches())
            if check is not None:
                check(state)   # may refuse the resume: nothing has been written yet
            now = utcnow()
            for row in spent:
                kept = study.trials[row.number]
                kept.status, kept.error = "failed", crash_error(kept.attempts)
                kept.finished_at = now
            for trial in study.trials.values():   # the job died while they ran
                for run in trial.runs:
                    run.status = "died" if run.status == "running" else run.status
            return state

    def rescore(self, study_id: int, objectives: Sequence[ObjectiveSpec],
                values: Mapping[int, Sequence[float | None] | None]) -> None:
        specs = rescored_specs(objectives)
        with self._lock:
            study = self._study(study_id)
            stored = {number: json_values(scores) for number, scores in values.items()}
            study.objective, study.direction = specs[0]
            study.objectives = stored_specs(specs)
            for number, scores in stored.items():
                trial = study.trials.get(number)
                if trial is not None:
                    trial.objective = scores[0] if scores else None
                    trial.objective_values = scores if len(specs) > 1 else None

    def update_config(self, study_id: int, config: Mapping[str, Any]) -> None:
        with self._lock:
            study = self._study(study_id)
            study.config = _json({**study.config, **config})

    def record(self, study_id: int, epochs: Sequence[EpochRecord] = (),
               results: Sequence[ResultRecord] = (), starts: Sequence[TrialStart] = (),
               started: Sequence[StartedRecord] = (),
               checkpoints: Sequence[Checkpoint] = (),
               suggested: Sequence[Suggested] = ()) -> None:
        if not epochs and not results and not starts and not started and not checkpoints \
                and not suggested:
            return
        now = utcnow()
        with self._lock:
            study = self._study(study_id)
            written = _written(study, epochs, results, starts, now)   # raises before any change
            for record in suggested:
                canonical_key({record.name: record.value})
                _json(record.distribution)
            for start in starts:
                _start(study, start, now, written)
            _suggest(study, suggested)
            for record in started:
                _started(study.trials.get(record.number), record)
            for checkpoint in checkpoints:
                trial = study.trials.get(checkpoint.number)
                if trial is not None:
                    trial.checkpoints[checkpoint.step] = checkpoint
            for (number, epoch), (record, metrics) in written.epochs.items():
                _epoch(study.trials.get(number), epoch, record.worker, metrics)
            for record in results:
                _result(study.trials.get(record.number), record, written.metrics[record.number])

    def forget(self, study_id: int, numbers: Sequence[int], interrupted: bool = False) -> None:
        with self._lock:
            study = self._study(study_id)
            for number in numbers:
                trial = study.trials.get(number)
                if trial is None:
                    continue
                run = trial.running
                if interrupted and run is not None and run.started_at is not None:
                    run.status, run.ended_at = "interrupted", utcnow()
                elif run is not None:   # never started: no attempt
                    trial.runs.remove(run)
                if not interrupted and trial.attempts <= 1 and not trial.runs:
                    del study.trials[number]   # never dispatched before
                    continue
                trial.attempts -= 1

    def study(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            found = self._studies.get(name)
            return None if found is None else study_dict(_copy(found))

    def trials(self, study: str, status: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            found = self._studies.get(study)
            if found is None:
                return []
            specs = study_objectives(found.objective, found.direction, found.objectives)
            return [trial_dict({**vars(_copy(row)), "study": study}, specs)
                    for _, row in sorted(found.trials.items())
                    if status is None or row.status == status]

    def checkpoints(self, study: str, number: int) -> list[Checkpoint]:
        with self._lock:
            trial = self._trial(study, number)
            return [] if trial is None else trial.kept()

    def study_checkpoints(self, study: str) -> list[Checkpoint]:
        with self._lock:
            found = self._studies.get(study)
            return [] if found is None else \
                [c for _, trial in sorted(found.trials.items()) for c in trial.kept()]

    def delete_checkpoints(self, study_id: int, deleted: Sequence[tuple[int, int]]) -> None:
        with self._lock:
            study = self._study(study_id)
            for number, step in deleted:
                trial = study.trials.get(number)
                if trial is not None:
                    trial.checkpoints.pop(step, None)

    def segments(self, study: str, number: int) -> list[Segment]:
        with self._lock:
            trial = self._trial(study, number)
            return [] if trial is None else _copy(trial).stretches()

    def attempts(self, study: str, number: int) -> list[dict[str, Any]]:
        with self._lock:
            trial = self._trial(study, number)
            return [] if trial is None else [attempt_dict(run) for run in trial.runs]

    def close(self) -> None:
        """Nothing to release: the results live as long as this object."""

    def _trial(self, study: str, number: int) -> _Trial | None:
        found = self._studies.get(study)
        return None if found is None else found.trials.get(number)

    def _study(self, study_id: int) -> _Study:
        found = next((s for s in self._studies.values() if s.id == study_id), None)
        if found is None:
            raise ResultsError(f"no study with id {study_id} in {self._url}")
        return found


def _json(value: Any) -> Any:
    """``value`` as a JSON column gives it back: a deep copy, tuples as lists; a value
    JSON cannot hold is a :class:`ResultsError`, as a database's driver refuses it."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError, RecursionError) as e:
        raise ResultsError(f"the memory results store cannot hold {e}") from e


def _copy(row: Any) -> Any:
    """A copy of a row whose JSON fields are copied too (nothing handed out aliases the
    store)."""
    if isinstance(row, _Study):
        return replace(row, config=_json(row.config), trials={})
    return replace(row, params=_json(row.params), metrics=_json(row.metrics),
                   objective_values=_json(row.objective_values), epochs=_json_epochs(row.epochs),
                   checkpoints=dict(row.checkpoints), runs=[replace(run) for run in row.runs],
                   distributions=_json(row.distributions),
                   segments=[replace(part, params=_json(part.params)) for part in row.segments])


def _json_epochs(epochs: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {epoch: _json(metrics) for epoch, metrics in epochs.items()}


@dataclass
class _Written:
    """What a :meth:`MemoryStorage.record` writes, made JSON before anything changes:
    each start's params, each result's metrics, the last report of each (trial, epoch)."""

    params: dict[int, dict[str, Any]]
    metrics: dict[int, dict[str, Any]]
    epochs: dict[tuple[int, int], tuple[EpochRecord, dict[str, Any]]]


def _written(study: _Study, epochs: Sequence[EpochRecord], results: Sequence[ResultRecord],
             starts: Sequence[TrialStart], now: datetime) -> _Written:
    latest = {(e.number, e.epoch): e for e in epochs}
    return _Written({t.number: _json(t.params) for t in starts},
                    {r.number: _json(json_metrics(r.metrics)) for r in results},
                    {key: (e, _json(json_metrics(e.metrics))) for key, e in latest.items()})


def _start(study: _Study, start: TrialStart, now: datetime, written: _Written) -> None:
    """A new ``running`` row, or a row run again reset (one more attempt; its epochs
    after the step resumed from dropped, its checkpoints and attempts kept); queued now;
    and its new attempt."""
    params = written.params[start.number]
    trial = study.trials.get(start.number)
    kept = _Trial(start.number, params, start.param_key, now)
    if trial is not None:
        step = start.resumed_from
        kept.epoch, kept.attempts = step, trial.attempts + 1
        kept.epochs = {epoch: metrics for epoch, metrics in trial.epochs.items()
                       if step is not None and epoch <= step}
        kept.checkpoints, kept.runs = trial.checkpoints, trial.runs
        kept.segments, kept.distributions = trial.segments, trial.distributions
    kept.runs.append(_Attempt(len(kept.runs) + 1, start.resumed_from))
    begun = new_segment(start, trial is not None)
    if begun is not None:
        from_step, parent_trial, parent_step = begun
        kept.segments.append(_Segment(len(kept.segments), from_step, _json(params),
                                      parent_trial, parent_step, now))
    study.trials[start.number] = kept


def _suggest(study: _Study, suggested: Sequence[Suggested]) -> None:
    """Merge each suggested parameter into its trial's params, param_key and
    distributions and its last segment's params (a trial not recorded: ignored); the
    records were checked storable before anything changed."""
    by_trial: dict[int, list[Suggested]] = {}
    for record in suggested:
        if record.number in study.trials:
            by_trial.setdefault(record.number, []).append(record)
    merged = {}
    for number, records in by_trial.items():
        trial = study.trials[number]
        params, distributions = _json(merged_suggestions(trial.params, trial.distributions,
                                                         records))
        merged[number] = params, canonical_key(params), distributions
    for number, (params, key, distributions) in merged.items():
        trial = study.trials[number]
        trial.params, trial.param_key, trial.distributions = params, key, distributions
        if trial.segments:
            last = trial.segments[-1]
            last.params = _json(merged_suggestions(last.params, None, by_trial[number])[0])


def _started(trial: _Trial | None, record: StartedRecord) -> None:
    if trial is None:
        return
    trial.started_at = record.at
    trial.worker = record.worker if record.worker is not None else trial.worker
    run = trial.running
    if run is not None:
        run.started_at = record.at
        run.worker = record.worker if record.worker is not None else run.worker


def _epoch(trial: _Trial | None, epoch: int, worker: int | None,
           metrics: dict[str, Any]) -> None:
    if trial is not None:
        trial.epochs[epoch] = metrics
        trial.epoch = trial.epoch if (trial.epoch or 0) > epoch else epoch
        trial.worker = worker if worker is not None else trial.worker


def _result(trial: _Trial | None, record: ResultRecord, metrics: dict[str, Any]) -> None:
    if trial is None:
        return
    run = trial.running
    if run is not None:
        run.status, run.ended_at = record.status, record.finished_at
        run.worker = record.worker if record.worker is not None else run.worker
        run.started_at = record.started_at or run.started_at
    paused = record.status == "paused"
    if paused:   # a pause is not a crash: not charged
        trial.attempts -= 1
    trial.status, trial.objective = record.status, record.objective
    trial.objective_values = json_values(record.objective_values)
    trial.time, trial.accuracy, trial.loss = record.time, record.accuracy, record.loss
    trial.metrics, trial.error = metrics, record.error
    trial.worker = record.worker if record.worker is not None else trial.worker
    trial.epoch = record.epoch if record.epoch is not None else trial.epoch
    trial.started_at = record.started_at or trial.started_at or trial.queued_at
    trial.finished_at = None if paused else record.finished_at


def _holder(row: _LeaseRow, now: datetime) -> Holder:
    """The holder of a lease row, its heartbeat's age at ``now``."""
    lease = row.lease
    return Holder(lease.host, lease.pid, lease.started_at,
                  (now - row.heartbeat_at).total_seconds())
