"""What one :meth:`ResultsStore.record` costs the search master, on SQLite and on
PostgreSQL (``db_url``): a pass of many reports is one transaction of a fixed number of
statements, a running trial's suggestions are merged without reading its row back, an
epoch reported again replaces its row, and what one store committed is whole for the
next (a crash after the commit loses nothing)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import event

from diel.results import EpochRecord, ResultRecord, ResultsStore, StartedRecord, Suggested, \
    TrialStart
from diel.results._storage import utcnow

FLOAT = {"kind": "float", "low": 0.0, "high": 1.0, "log": False}


def start(n: int, params: dict | None = None, resumed_from: int | None = None) -> TrialStart:
    params = {"a": n} if params is None else params
    return TrialStart(n, params, repr(sorted(params.items())), resumed_from=resumed_from)


@contextmanager
def counted(store: ResultsStore) -> Iterator[dict[str, list]]:
    """The SQL statements and commits the store sends while the block runs."""
    seen: dict[str, list] = {"statements": [], "commits": []}

    def statement(conn, cursor, text, parameters, context, many):
        seen["statements"].append(text)

    def commit(conn):
        seen["commits"].append(True)
    engine = store.db.engine
    event.listen(engine, "before_cursor_execute", statement)
    event.listen(engine, "commit", commit)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", statement)
        event.remove(engine, "commit", commit)


def selects(seen: dict[str, list]) -> list[str]:
    """The SELECT statements among those ``counted`` saw."""
    return [text for text in seen["statements"] if text.lstrip().upper().startswith("SELECT")]


def a_pass(numbers: range) -> dict:
    """Every report a pass can carry for trials ``numbers``: their start reports, three
    suggestions, eight epochs and the result of each."""
    now = utcnow()
    return {"started": [StartedRecord(n, n % 4, now) for n in numbers],
            "suggested": [Suggested(n, f"p{i}", i / 10, FLOAT) for n in numbers
                          for i in range(3)],
            "epochs": [EpochRecord(n, e, {"value": e / 10}, worker=n % 4) for n in numbers
                       for e in range(8)],
            "results": [ResultRecord(n, "ok", 0.5, epoch=7, worker=n % 4) for n in numbers]}


def test_a_pass_of_many_reports_is_one_commit_of_as_many_statements_as_one(db_url):
    """Eight trials' reports cost the same statements as one trial's (one executemany
    each), in one transaction, none of them a SELECT; the trials' starts are not looked
    for (a study opened by this store has no row it does not know): the one SELECT of
    a start reads back the ids of the rows it inserted."""
    store = ResultsStore(db_url)
    try:
        state = store.open_study("s", "tpe", "value", "maximize", {})
        with counted(store) as starting:
            store.record(state.study_id, starts=[start(n) for n in range(9)])
        assert len(starting["commits"]) == 1
        assert len(selects(starting)) == 1
        with counted(store) as one:
            store.record(state.study_id, **a_pass(range(1)))
        with counted(store) as eight:
            store.record(state.study_id, **a_pass(range(1, 9)))
        assert len(one["commits"]) == len(eight["commits"]) == 1
        assert len(eight["statements"]) == len(one["statements"]) <= 10
        assert not selects(one) and not selects(eight)
        rows = store.trials("s")
    finally:
        store.close()
    assert [row["status"] for row in rows] == ["ok"] * 9
    assert all(row["params"] == {"a": row["number"], "p0": 0.0, "p1": 0.1, "p2": 0.2}
               for row in rows)


def test_suggestions_merge_without_reading_back_and_survive_a_new_store(db_url):
    """A running trial's suggestions are merged into its row and its segment from what
    the store wrote, with no SELECT; a new store (after a crash) reads them back and
    merges the next ones, as it does for a trial dispatched again."""
    store = ResultsStore(db_url)
    try:
        state = store.open_study("s", "tpe", "value", "maximize", {})
        store.record(state.study_id, starts=[start(0, {"a": 1}), start(1, {"a": 2})])
        store.record(state.study_id, suggested=[Suggested(0, "x", 0.25, FLOAT)])
        with counted(store) as seen:
            store.record(state.study_id, suggested=[Suggested(0, "y", 0.5, FLOAT)])
        assert not selects(seen)
        store.record(state.study_id, results=[ResultRecord(1, "paused", epoch=2)])
    finally:
        store.close()   # the job dies here: only what was committed is left

    again = ResultsStore(db_url)
    try:
        state = again.open_study("s", "tpe", "value", "maximize", {})
        again.record(state.study_id, suggested=[Suggested(0, "z", 0.75, FLOAT)],
                     starts=[start(1, {"a": 2}, resumed_from=2)])
        again.record(state.study_id, suggested=[Suggested(1, "w", 0.1, FLOAT)])
        rows = {row["number"]: row for row in again.trials("s")}
        segments = {n: again.segments("s", n) for n in (0, 1)}
    finally:
        again.close()
    assert rows[0]["params"] == {"a": 1, "x": 0.25, "y": 0.5, "z": 0.75}
    assert segments[0][-1].params == rows[0]["params"]
    assert rows[1]["params"] == segments[1][-1].params == {"a": 2, "w": 0.1}


def test_an_epoch_reported_again_replaces_its_row(db_url):
    store = ResultsStore(db_url)
    try:
        state = store.open_study("s", "random", "value", "maximize", {})
        store.record(state.study_id, starts=[start(0)])
        store.record(state.study_id, epochs=[EpochRecord(0, 1, {"value": 0.1})])
        store.record(state.study_id, epochs=[EpochRecord(0, 1, {"value": 0.2}),
                                             EpochRecord(0, 2, {"value": 0.3})],
                     results=[ResultRecord(0, "ok", 0.3, epoch=2)])
    finally:
        store.close()
    reopened = ResultsStore(db_url)
    try:
        state = reopened.open_study("s", "random", "value", "maximize", {})
    finally:
        reopened.close()
    assert state.finished[0].epochs == {1: {"value": 0.2}, 2: {"value": 0.3}}


def test_new_trials_around_earlier_ones_get_their_own_rows(db_url):
    """A pass's new trials are found by the range of their numbers: trials 0 and 3 are
    new beside 1 and 2, dispatched before (and 1 run again in the same pass)."""
    store = ResultsStore(db_url)
    try:
        state = store.open_study("s", "random", "value", "maximize", {})
        store.record(state.study_id, starts=[start(1), start(2)])
        store.record(state.study_id, starts=[start(0), start(1), start(3)],
                     results=[ResultRecord(2, "ok", 0.2)])
        store.record(state.study_id, results=[ResultRecord(n, "ok", n / 10) for n in (0, 1, 3)])
        rows = {t["number"]: (t["params"], t["objective"], t["attempts"])
                for t in store.trials("s")}
    finally:
        store.close()
    assert rows == {0: ({"a": 0}, 0.0, 1), 1: ({"a": 1}, 0.1, 2), 2: ({"a": 2}, 0.2, 1),
                    3: ({"a": 3}, 0.3, 1)}
