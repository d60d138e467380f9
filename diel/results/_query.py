"""Reading results: :func:`open` a database and list studies and trials as plain dicts,
:class:`Results`, the one reader ``diel results``, ``diel plot`` and the dashboard use.
What it reads with lives beside it, one job a module: the filters
(:mod:`~diel.results._filters`), the sort (:mod:`~diel.results._sorting`), the keys they
name (:mod:`~diel.results._keys`), recognizing a database and its schema
(:mod:`~diel.results._recognize`), and what following a study needs beyond its trials
(:mod:`~diel.results._details`).

Filters (``where``) are strings ``KEY OP VALUE`` with OP one of ``= != < <= > >=``
(:mod:`diel.results._filters` says how a value is read: ``"16"`` is a string, ``16`` a
number, ``true``/``false``/``null`` what JSON means by them). KEY is a trial column
(``number status objective accuracy loss time epoch worker attempts``), ``params.NAME`` or
``metrics.NAME`` (extra metrics), or a bare name: a parameter, else an extra metric. They
are turned into SQLAlchemy expressions, so every value (and every JSON key) reaches the
database as a bound parameter, never as SQL text. A key must exist in the database (a
column, or a name some trial recorded or some study's space declares), else
:class:`ValueError` lists the keys that do; a value of a type the key never holds is a
:class:`ValueError` too: a typo never silently matches nothing. A comparison only
matches values of its own type, so a parameter holding both numbers and strings filters
the same everywhere.

Reading never writes (the database is opened read-only) and works on every schema
version: trials are selected column by column, and ``attempts`` (schema 2) only where
the table has it. A database of schema 1 is read as it is, never upgraded; its trial
dicts have no ``attempts`` key. A file that is not a diel results database (empty, not
SQLite, another program's SQLite) is refused with :class:`ResultsError` (no
``__cause__``: a usage error) and left byte-for-byte as it was. Each method reads in one
short transaction; :meth:`Results.snapshot` makes a thread's reads share one.

Studies of several objectives (schema 4): their trial dicts carry ``objectives``, each
objective's expression and the trial's value of it; ``objective`` is the first one's,
which ranks them by default. :meth:`Results.pareto` lists the trials of their Pareto
front (:mod:`diel.results._pareto`).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from sqlalchemy import func, select
from sqlalchemy.sql.elements import ColumnElement

from diel.results import _details
from diel.results._database import Database, resolve_url
from diel.results._filters import Filter, check_kind, parse_filter, where_clause
from diel.results._keys import COLUMNS, OPTIONAL, Keys, read_keys, resolver
from diel.results._models import STATUSES, CheckpointModel, StudyModel, TrialModel
from diel.results._numbers import LARGEST
from diel.results._objectives import choose_objectives, describe_objectives, \
    study_objectives
from diel.results._ranking import pareto_trials
from diel.results._recognize import check_file, read_schema
from diel.results._rows import iso_or_none, trial_dict
from diel.results._sorting import order_by, parse_sort
from diel.results._storage import ObjectiveSpec, Segment

__all__ = ["Results", "open", "parse_filter", "Filter", "Keys", "COLUMNS"]


class Results:
    """Read access to a results database (see :func:`open`).

    Each method reads in one short read-only transaction of its own; within
    :meth:`snapshot` a thread's reads share one (a consistent view, one transaction for
    a whole dashboard request). One object may serve several threads."""

    def __init__(self, url_or_path: str | Path) -> None:
        self.db = Database(resolve_url(url_or_path), readonly=True)
        try:
            check_file(self.db)
            self._schema = read_schema(self.db)
        except BaseException:
            self.db.close()
            raise
        self._fields = self._schema.fields
        self._dialect = self.db.engine.dialect.name
        self._local = threading.local()   # the session of this thread's snapshot

    @property
    def label(self) -> str:
        """How messages name the database: its SQLite file, else its URL without any
        password."""
        return self.db.label

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads made in the block by this thread share one read transaction (nested
        blocks join it). Keep it short: a transaction open on SQLite keeps the search's
        writes from being folded back into the file."""
        if getattr(self._local, "session", None) is not None:
            yield
            return
        with self.db.session() as session:
            self._local.session = session
            try:
                yield
            finally:
                self._local.session = None

    @contextmanager
    def _session(self) -> Iterator[Any]:
        """This thread's snapshot's session, else a session of its own."""
        shared = getattr(self._local, "session", None)
        if shared is not None:
            yield shared
            return
        with self.db.session() as session:
            yield session

    def _objectives(self, session: Any) -> dict[str, tuple[ObjectiveSpec, ...]]:
        """Every study's objectives (one pair for a study of one), by study name."""
        study = StudyModel
        listed = [study.objectives] if self._schema.several else []
        return {row.name: study_objectives(row.objective, row.direction,
                                           row.objectives if listed else None)
                for row in session.execute(select(study.name, study.objective,
                                                  study.direction, *listed))}

    def _checkpoint_bytes(self, session: Any, chosen: list[ColumnElement[bool]]) -> dict[int, int]:
        """The bytes of the kept checkpoints of each study (``chosen``: a name filter)."""
        if not self._schema.checkpoints:
            return {}
        ckpt = CheckpointModel
        return {study_id: int(total) for study_id, total in session.execute(
            select(TrialModel.study_id, func.sum(ckpt.nbytes))
            .join(ckpt, ckpt.trial_id == TrialModel.id)
            .join(StudyModel, StudyModel.id == TrialModel.study_id)
            .where(ckpt.deleted_at.is_(None), *chosen).group_by(TrialModel.study_id))}

    def studies(self, name: str | None = None) -> list[dict[str, Any]]:
        """Every study with its settings and trial counts per status, by name; with
        ``name``, that study alone (its best or front is all that is computed), or a
        :class:`ValueError` listing the studies there are.

        ``objectives`` lists each objective (``expression``, ``direction``); a study of
        one has its best objective value in ``best``, a study of several the size of
        its Pareto front in ``front`` (and ``best`` None). ``checkpoint_bytes``: the
        disk its kept checkpoints use (0 before schema 6)."""
        counts: dict[tuple[int, str], int] = {}
        study = StudyModel
        with self._session() as s:
            if name is not None:
                self._check_study(s, name)
            chosen = [] if name is None else [study.name == name]
            for study_id, status, n in s.execute(
                    select(TrialModel.study_id, TrialModel.status, func.count())
                    .join(study, TrialModel.study_id == study.id).where(*chosen)
                    .group_by(TrialModel.study_id, TrialModel.status)):
                counts[(study_id, status)] = n
            rows = s.execute(select(study.id, study.name, study.strategy, study.objective,
                                    study.direction, study.created_at, study.updated_at)
                             .where(*chosen).order_by(study.name)).all()
            disk = self._checkpoint_bytes(s, chosen)
            objectives = self._objectives(s)
            out = []
            for st in rows:
                per_status = {status: counts.get((st.id, status), 0) for status in STATUSES}
                specs = objectives[st.name]
                front = None
                if len(specs) > 1:
                    front, best = len(self._front(s, st.name, specs, range(len(specs)))), []
                else:
                    best = self._select(s, st.name, 1, "ok", [], None)
                out.append({"name": st.name, "strategy": st.strategy,
                            "objective": st.objective, "direction": st.direction,
                            "objectives": [{"expression": text, "direction": way}
                                           for text, way in specs],
                            "trials": sum(per_status.values()), **per_status,
                            "best": best[0]["objective"] if best else None, "front": front,
                            "checkpoint_bytes": disk.get(st.id, 0),
                            "created_at": iso_or_none(st.created_at),
                            "updated_at": iso_or_none(st.updated_at)})
        return out

    def trials(self, study: str | None = None, top: int | None = None,
               sort: str | None = None, status: str | None = None,
               where: Iterable[str] = (), offset: int = 0) -> list[dict[str, Any]]:
        """Trials as dicts, filtered and sorted in the database.

        ``study`` limits to one study; ``status`` to one status; ``where`` is a list of
        filters (module docstring); ``sort`` is ``KEY[:asc|:desc]`` (default: best
        objective first); ``offset`` skips the first N after sorting and ``top`` keeps
        the first N after that (a page: ``offset=100, top=50``). Malformed arguments, an
        unknown study and an unknown key raise :class:`ValueError` naming the argument
        and what exists or is expected.
        """
        _check_count("top", top, 1)
        _check_count("offset", offset, 0)
        filters = self._filters(status, where)
        parsed_sort = parse_sort(sort)
        self._check_recorded([parsed_sort[0] if parsed_sort else ""])
        with self._session() as s:
            resolved = self._resolved(s, study, filters)
            if parsed_sort is not None:
                parsed_sort = (self._resolver(s)(parsed_sort[0], f"sort {sort!r}"),
                               parsed_sort[1])
            rows = self._select(s, study, top, status, self._clauses(resolved), parsed_sort,
                                offset)
            if not rows:
                self._why_empty(s, study, resolved)
            return rows

    def count(self, study: str | None = None, status: str | None = None,
              where: Iterable[str] = ()) -> int:
        """How many trials :meth:`trials` lists with these arguments (and no ``top``):
        counted in the database, for paging. Raises as :meth:`trials` does."""
        filters = self._filters(status, where)
        with self._session() as s:
            resolved = self._resolved(s, study, filters)
            query = _restricted(select(func.count()).select_from(TrialModel)
                                .join(StudyModel, TrialModel.study_id == StudyModel.id),
                                study, status, self._clauses(resolved))
            found = int(s.scalar(query) or 0)
            if not found:
                self._why_empty(s, study, resolved)
            return found

    # -- what following a study needs beyond its trials (diel.results._details) ------

    def config(self, study: str) -> dict[str, Any]:
        """The settings study ``study`` was stored with, as its search master stored
        them (its space under ``space``); :class:`ValueError` listing the studies when
        there is no such study."""
        with self._session() as s:
            found = _details.study_config(s, study)
            if found is None:
                self._check_study(s, study)
            return found or {}

    def epochs(self, study: str, numbers: Sequence[int] | None = None,
               ) -> dict[int, dict[int, dict[str, Any]]]:
        """The per-epoch reports of the trials ``numbers`` of ``study`` (None: every
        trial), in one query: trial number -> epoch -> metrics, in that order; a trial
        that reported nothing is absent. :class:`ValueError` when there is no such
        study."""
        with self._session() as s:
            found = _details.epochs(s, study, numbers)
            if not found:
                self._check_study(s, study)
            return found

    def lineage(self, number: int, study: str | None = None) -> list[Segment]:
        """The segments of trial ``number`` (its parameter sets, each from the step it
        took effect, and whose checkpoint it was copied from: a population-based
        training member's schedule), in order; ``[]`` for a trial without segments (or
        a database from before them, schema 7). ``study`` may be left out when one study
        alone has a trial ``number``. :class:`ValueError` naming what there is for no
        such study or trial, or a number several studies have."""
        with self._session() as s:
            study = self._study_of(s, number, study)
            if not self._schema.segments:
                return []
            return _details.segments(s, study, [number]).get(number, [])

    def segments(self, study: str, numbers: Sequence[int] | None = None,
                 ) -> dict[int, list[Segment]]:
        """The segments of the trials ``numbers`` of ``study`` (None: every trial) that
        have some, by trial number (see :meth:`lineage`); {} before schema 7.
        :class:`ValueError` when there is no such study."""
        with self._session() as s:
            self._check_study(s, study)
            return _details.segments(s, study, numbers) if self._schema.segments else {}

    def exploited(self, study: str) -> bool:
        """Whether some trial of ``study`` went on from another trial's checkpoint with
        new parameters (population-based training's exploit: it has a lineage to draw);
        False before schema 7. :class:`ValueError` when there is no such study."""
        with self._session() as s:
            self._check_study(s, study)
            return self._schema.segments and _details.exploited(s, study)

    def distributions(self, study: str, numbers: Sequence[int] | None = None,
                      ) -> dict[int, dict[str, Any]]:
        """The distributions of the parameters each trial ``numbers`` of ``study`` (None:
        every trial) asked for as it ran (define-by-run), by trial number and name, in
        diel's JSON form; trials that asked for none are absent; {} before schema 7.
        :class:`ValueError` when there is no such study."""
        with self._session() as s:
            self._check_study(s, study)
            return _details.distributions(s, study, numbers) if self._schema.segments else {}

    def study_of(self, number: int, study: str | None = None) -> str:
        """The study of trial ``number``: ``study`` when it has one, else the one study
        that has; :class:`ValueError` naming what there is otherwise."""
        with self._session() as s:
            return self._study_of(s, number, study)

    def _study_of(self, session: Any, number: Any, study: str | None) -> str:
        """:meth:`study_of` in ``session``."""
        if isinstance(number, bool) or not isinstance(number, int):
            raise ValueError(f"a trial number is a whole number, got {number!r}")
        if study is not None:
            self._check_study(session, study)
        query = select(StudyModel.name).join(TrialModel, TrialModel.study_id == StudyModel.id) \
            .where(TrialModel.number == number).order_by(StudyModel.name)
        names = list(session.scalars(query if study is None else
                                     query.where(StudyModel.name == study)))
        if len(names) == 1:
            return names[0]
        if names:
            raise ValueError(f"trial {number} is in several studies ({', '.join(names)}); "
                             "name its study")
        where = f"study {study!r}" if study is not None else self.db.label
        last = session.scalar(select(func.max(TrialModel.number)).join(
            StudyModel, TrialModel.study_id == StudyModel.id).where(
            *([StudyModel.name == study] if study is not None else [])))
        held = "no trials" if last is None else f"trials numbered 0 to {last}"
        raise ValueError(f"no trial {number} in {where} (it has {held})")

    def reported(self, study: str) -> set[int]:
        """The numbers of the trials of ``study`` that reported per-epoch metrics."""
        with self._session() as s:
            return _details.reported(s, study)

    def workers(self, study: str) -> list[dict[str, Any]]:
        """Each worker copy seen in the trials of ``study`` (``copy``; None for trials
        no copy has taken yet, listed last), with its number of ``trials``, their counts
        per status and ``last_finished_at``."""
        with self._session() as s:
            return _details.workers(s, study)

    def runs(self) -> dict[str, dict[str, Any]]:
        """The runs holding a study's lease, by study name: ``host``, ``pid``,
        ``started_at``, ``heartbeat_age_s`` and ``live`` (a heartbeat younger than the
        age at which a lease is stale); {} for a database before leases (schema 3)."""
        if not self._schema.leases:
            return {}
        with self._session() as s:
            return _details.runs(s)

    def versions(self) -> dict[str, str]:
        """One short string per study name that changes whenever the study does (a
        trial dispatched, finished or reporting an epoch, its settings rescored, its
        lease taken or given back): cheap to ask every few seconds."""
        with self._session() as s:
            return _details.versions(s, self._schema.leases)

    # -- the queries -----------------------------------------------------------------

    def _filters(self, status: str | None, where: Iterable[str]) -> list[Filter]:
        """The checked ``status`` and parsed ``where`` of :meth:`trials`."""
        if status is not None and status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
        filters = [parse_filter(w) for w in where]
        self._check_recorded([f.key for f in filters])
        return filters

    def _resolved(self, session: Any, study: str | None,
                  filters: list[Filter]) -> list[tuple[Filter, str]]:
        """``filters`` with the keys they name resolved (the study checked first, when
        named)."""
        if study is not None:
            self._check_study(session, study)
        resolve = self._resolver(session)
        return [(f, resolve(f.key, f"filter {f.text!r}")) for f in filters]

    def _resolver(self, session: Any) -> Any:
        return resolver(session, self._dialect, self._fields, self.db.label)

    def _clauses(self, resolved: list[tuple[Filter, str]]) -> list[ColumnElement[bool]]:
        """The WHERE clauses of resolved filters."""
        return [where_clause(f, key, self._dialect) for f, key in resolved]

    def _why_empty(self, session: Any, study: str | None,
                   resolved: list[tuple[Filter, str]]) -> None:
        """After a query matched nothing: a :class:`ValueError` when a filter compares a
        parameter or metric with a value of a type the trials (of ``study``, or all)
        never hold there, so that it could match nothing."""
        place = f"in study {study!r}" if study is not None else f"in {self.db.label}"
        for f, key in resolved:
            check_kind(session, f, key, self._dialect, study, place)

    def _select(self, session: Any, study: str | None, top: int | None, status: str | None,
                conditions: list[ColumnElement[bool]],
                sort: tuple[str, str] | None, offset: int = 0) -> list[dict[str, Any]]:
        """Run the trials query (arguments already checked and resolved)."""
        columns = [getattr(TrialModel, name) for name in self._fields]
        query = _restricted(select(StudyModel.name.label("study"), *columns)
                            .join(StudyModel, TrialModel.study_id == StudyModel.id)
                            .order_by(*order_by(sort, self._dialect)),
                            study, status, conditions)
        if offset:
            query = query.offset(offset)
        if top is not None:
            query = query.limit(top)
        rows = session.execute(query).all()
        objectives = self._objectives(session) if self._schema.several and rows else {}
        return [trial_dict(row._mapping, objectives.get(row.study, ())) for row in rows]

    def pareto(self, study: str | None = None, objectives: Sequence[str] = (),
               sort: str | None = None, where: Iterable[str] = (),
               top: int | None = None) -> list[dict[str, Any]]:
        """The Pareto front of a study of several objectives: its ``ok`` trials that no
        other ``ok`` trial of the study dominates (:func:`pareto_front`), as
        :meth:`trials` gives them.

        ``study`` names the study (default: every study of several objectives, each
        its own front); ``objectives`` the expressions to build the front over (default:
        all of the study's); ``where`` keeps only the trials the front is chosen among;
        ``sort`` orders the front (default: best first in its first objective); ``top``
        keeps the first N. :class:`ValueError`, naming what there is, for a study of one
        objective, a database without a study of several, an objective the study does
        not have, or what :meth:`trials` refuses.
        """
        _check_count("top", top, 1)
        filters = [parse_filter(w) for w in where]
        parsed_sort = parse_sort(sort)
        self._check_recorded([f.key for f in filters] + [parsed_sort[0] if parsed_sort else ""])
        with self._session() as s:
            resolved = self._resolved(s, study, filters)
            specs = self._objectives(s)
            names = [study] if study is not None else \
                sorted(name for name, found in specs.items() if len(found) > 1)
            if study is not None and len(specs[study]) < 2:
                raise ValueError(f"study {study!r} has one objective, "
                                 f"{describe_objectives(specs[study])}; "
                                 "a Pareto front needs a study of several (the search "
                                 "setting objectives)")
            if not names:
                raise ValueError(f"no study in {self.db.label} has several objectives; a "
                                 "Pareto front needs one (the search setting objectives)")
            if parsed_sort is not None:
                parsed_sort = (self._resolver(s)(parsed_sort[0], f"sort {sort!r}"),
                               parsed_sort[1])
            front = []
            for name in names:
                chosen = choose_objectives(name, specs[name], objectives)
                front += self._front(s, name, specs[name], chosen, self._clauses(resolved),
                                     parsed_sort)
            if not front:
                self._why_empty(s, study, resolved)
        return front[:top]

    def _front(self, session: Any, study: str, specs: Sequence[ObjectiveSpec],
               chosen: Sequence[int], conditions: list[ColumnElement[bool]] | None = None,
               sort: tuple[str, str] | None = None) -> list[dict[str, Any]]:
        """The front of one study of several objectives over the objectives at positions
        ``chosen``, among its ok trials meeting ``conditions``: in ``sort`` order, or
        best first in the first chosen objective."""
        rows = self._select(session, study, None, "ok", conditions or [], sort)
        return pareto_trials(rows, specs, chosen, keep_order=sort is not None)

    def _check_study(self, session: Any, study: str) -> None:
        """A :class:`ValueError` listing the studies when there is no study ``study``."""
        names = list(session.scalars(select(StudyModel.name).order_by(StudyModel.name)))
        if study not in names:
            raise ValueError(f"no study {study!r} in {self.db.label}; its studies: "
                             f"{', '.join(names) or 'none yet'}")

    def keys(self) -> Keys:
        """The keys ``where`` and ``sort`` accept in this database."""
        with self._session() as s:
            return read_keys(s, self._dialect, self._fields)

    def _check_recorded(self, keys: Iterable[str]) -> None:
        """A :class:`ValueError` for a filter or sort on a column this database's schema
        lacks (``attempts`` in a database of an older diel)."""
        for key in keys:
            if key in OPTIONAL and key not in self._fields:
                raise ValueError(f"{key} is not recorded in {self.db.safe_url} (written by "
                                 "an older diel)")

    def close(self) -> None:
        """Release the connections."""
        self.db.close()

    def __enter__(self) -> "Results":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_count(name: str, value: Any, low: int) -> None:
    """A :class:`ValueError` unless ``value`` (``top``: None allowed) is an int from
    ``low`` to the largest the database stores."""
    if value is None and name == "top":
        return
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= LARGEST:
        raise ValueError(f"{name} must be a whole number from {low} to {LARGEST}, "
                         f"got {value!r}")


def _restricted(query: Any, study: str | None, status: str | None,
                conditions: list[ColumnElement[bool]]) -> Any:
    """``query`` (over trials joined with studies) limited to ``study``, ``status`` and
    ``conditions``."""
    if study is not None:
        query = query.where(StudyModel.name == study)
    if status is not None:
        query = query.where(TrialModel.status == status)
    for condition in conditions:
        query = query.where(condition)
    return query


def open(url_or_path: str | Path) -> Results:  # noqa: A001 - the API is diel.results.open
    """Open a results database for reading: a SQLAlchemy URL or a SQLite file path.

    Raises :class:`ResultsError` when the file does not exist or holds no results.
    """
    return Results(url_or_path)
