"""The search master with an in-memory tuple space and worker threads (no MPI), on the
in-memory results store; the tests whose subject is the SQL store (a full disk, the
module's default SQLite database) on SQLite."""

from __future__ import annotations

import io
import logging
import sqlite3
import threading
import time
from collections import Counter
from datetime import datetime, timezone
from types import SimpleNamespace

import pytest

import diel.results
from diel.errors import ConfigError, DatabaseUnwritable
from diel.limits import ERROR_CHARS, METRIC_TEXT_CHARS
from diel.results import MemoryStorage, ResultRecord, ResultsStore, StartedRecord, StudyState, \
    TrialStart
from diel.search import main, parse_settings, run_search
from diel.search.master import MAX_PREFETCH, _Loop
from diel.search.space import param_key
from diel.worker.inprocess import InProcessRunner
from diel.worker.serve import serve_tasks as serve_with
from tests.helpers.fakespace import FakeSpace
from tests.helpers.search import Harness, accuracy_of, serve_tasks, simple_trial


GRID = {"lr": {"values": [0.1, 0.01, 0.001]}, "layers": {"range": [1, 3], "step": 1}}


@pytest.mark.parametrize("mode", ["batch", "async"])
def test_full_grid_runs_every_point_exactly_once(tmp_path, mode):
    h = Harness(tmp_path)
    summary = h.run({"strategy": "grid", "space": GRID, "mode": mode})
    trials = h.trials()
    assert len(trials) == 9 and {t["status"] for t in trials} == {"ok"}
    assert Counter(param_key(t["params"]) for t in trials) == Counter(
        param_key({"lr": lr, "layers": n}) for lr in (0.1, 0.01, 0.001) for n in (1, 2, 3))
    assert len(h.trained) == 9
    assert summary.stop_reason == "grid exhausted"
    assert summary.best[0]["params"] == {"lr": 0.01, "layers": 3}
    assert trials[0]["params"] == {"lr": 0.01, "layers": 3}  # best first
    assert all(t["epoch"] == 1 and t["worker"] in (0, 1, 2) for t in trials)
    assert h.space.pending() == {}  # every stop was taken, no stray prune orders


def flat(value) -> list:
    """The reports in one value a worker put: a report, or a result and the next start
    put together as a list."""
    return value if isinstance(value, list) else [value]


def _task_and_result_order(space: FakeSpace) -> list[tuple[str, int]]:
    events = []
    for tag, value in space.log:
        if tag == "s/task" and value is not None:
            events.append(("task", value["trial"]))
        elif tag == "s/report":
            events += [("result", one["trial"]) for one in flat(value) if one["kind"] == "result"]
    return events


def slow_first(params: dict, report) -> dict:
    time.sleep(0.3 if params["lr"] == 0.1 and params["layers"] == 1 else 0.01)
    return {"accuracy": accuracy_of(params), "loss": 0.1}


def test_batch_mode_waits_for_the_whole_group(tmp_path):
    h = Harness(tmp_path, workers=3)
    h.run({"space": GRID, "mode": "batch"}, trial=slow_first)
    outstanding, groups, current = 0, [], []
    for kind, trial in _task_and_result_order(h.space):
        if kind == "task":
            assert outstanding == len(current), "a task went out before its group finished"
            current.append(trial)
            outstanding += 1
        else:
            outstanding -= 1
            if outstanding == 0:
                groups.append(current)
                current = []
    assert groups == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]


def test_async_mode_keeps_workers_busy(tmp_path):
    h = Harness(tmp_path, workers=3)
    h.run({"space": GRID, "mode": "async"}, trial=slow_first)
    events = _task_and_result_order(h.space)
    # the slow trial 0 is still running while the others go on: all 8 others start and
    # finish before its result comes back
    assert events.index(("result", 0)) == len(events) - 1
    assert len(h.trials(status="ok")) == 9


def test_failing_and_diverging_trials_are_recorded_and_search_goes_on(tmp_path):
    def flaky(params, report):
        if params["layers"] == 2:
            raise RuntimeError("out of memory")
        if params["lr"] == 0.1:
            return {"accuracy": 0.1, "loss": float("nan")}
        return simple_trial(params, report)
    h = Harness(tmp_path)
    summary = h.run({"space": GRID}, trial=flaky)
    by_status = Counter(t["status"] for t in h.trials())
    assert by_status == {"failed": 5, "ok": 4}
    errors = {t["error"] for t in h.trials(status="failed")}
    assert any(e.startswith("RuntimeError: out of memory") for e in errors)
    assert "diverged: loss is nan" in errors
    assert summary.stats.failed == 5 and summary.best[0]["status"] == "ok"


def test_random_search_stops_at_its_threshold(tmp_path):
    def trial(params, report):
        return {"accuracy": params["x"], "loss": 1 - params["x"]}
    h = Harness(tmp_path, workers=2)
    summary = h.run({"strategy": "random", "space": {"x": {"uniform": [0, 1]}},
                     "max_trials": 500, "seed": 3, "stop_when": "accuracy >= 0.98",
                     "prefetch": 1},
                    trial=trial)
    trials = h.trials()
    assert summary.stop_reason.startswith("stop_when (accuracy >= 0.98) met by trial")
    assert len(trials) < 500
    hit = min(t["number"] for t in trials if t["accuracy"] >= 0.98)
    # only trials dispatched before the hit came back ran after it: 2 workers, each with
    # one queued task (prefetch 1), so at most 3 later numbers; queued ones are taken back
    assert max(t["number"] for t in trials) <= hit + 3
    assert {t["status"] for t in trials} == {"ok"}  # no row left for a task taken back
    assert len(trials) == len(h.trained)
    assert all(0 <= t["params"]["x"] <= 1 for t in trials)


def test_random_search_is_reproducible_and_honours_max_trials(tmp_path):
    settings = {"strategy": "random", "seed": 11, "max_trials": 6,
                "space": {"lr": {"loguniform": [1e-4, 1e-1]}, "layers": {"int": [1, 3]}}}
    first, second = Harness(tmp_path / "a"), Harness(tmp_path / "b")
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    first.run(settings)
    second.run(settings)
    params = [{t["number"]: t["params"] for t in h.trials()} for h in (first, second)]
    assert params[0] == params[1] and sorted(params[0]) == list(range(6))


def test_time_budget_stops_starting_trials(tmp_path):
    def slow(params, report):
        time.sleep(0.1)
        return {"accuracy": 0.5, "loss": 0.5}
    h = Harness(tmp_path, workers=2)
    summary = h.run({"strategy": "random", "space": {"x": {"uniform": [0, 1]}},
                     "time_budget": 0.35, "seed": 1}, trial=slow)
    assert summary.stop_reason.startswith("time budget")
    assert 2 <= len(h.trials()) <= 12
    assert {t["status"] for t in h.trials()} == {"ok"}


def test_resume_reruns_only_trials_left_running(tmp_path):
    settings = {"space": GRID, "mode": "async"}
    points = parse_settings(settings, "search").space.grid()
    h = Harness(tmp_path)
    with h.opened() as store:
        state = store.open_study("s", "grid", "accuracy", "maximize", {})
        store.record(state.study_id, starts=[TrialStart(i, p, param_key(p))
                                            for i, p in enumerate(points[:5])])
        store.record(state.study_id, [], [ResultRecord(i, "ok", objective=0.5, accuracy=0.5)
                                          for i in (0, 2)]
                     + [ResultRecord(3, "failed", error="boom")])
    # trials 1 and 4 are left "running", as after a crash
    h.run(settings)
    trained = Counter(param_key(p) for p in h.trained)
    expected = [points[1], points[4], *points[5:]]
    assert trained == Counter(param_key(p) for p in expected)
    trials = h.trials(sort="number")
    assert [t["number"] for t in trials] == list(range(9))
    assert Counter(param_key(t["params"]) for t in trials) == Counter(map(param_key, points))
    assert [t["status"] for t in trials] == ["ok"] * 3 + ["failed"] + ["ok"] * 5
    assert trials[0]["accuracy"] == 0.5  # finished trials were not touched


def test_median_pruner_stops_bad_trials(tmp_path):
    def curve(params, report):
        for epoch in range(1, 6):
            time.sleep(0.01)
            if report(epoch, {"accuracy": params["q"] * epoch / 5}):
                return {"accuracy": params["q"] * epoch / 5, "loss": 1.0}
        return {"accuracy": params["q"], "loss": 1 - params["q"]}
    h = Harness(tmp_path, workers=1)
    h.run({"space": {"q": {"values": [0.9, 0.8, 0.85, 0.1, 0.2]}},
           "pruner": {"median": {"min_trials": 3, "warmup_epochs": 1}}}, trial=curve)
    trials = {t["params"]["q"]: t for t in h.trials()}
    assert [trials[q]["status"] for q in (0.9, 0.8, 0.85)] == ["ok"] * 3
    for q in (0.1, 0.2):
        assert trials[q]["status"] == "pruned" and 2 <= trials[q]["epoch"] < 5


def test_main_uses_the_context(tmp_path):
    space = FakeSpace()
    worker = threading.Thread(target=serve_tasks, args=(space, "wf", 0, simple_trial),
                              daemon=True)
    worker.start()
    ctx = SimpleNamespace(
        name="search", copy=0, rank=0, space=space, log=__import__("logging").getLogger("t"),
        config={"space": {"lr": {"values": [0.1, 0.01]}}, "workers": "trainer"},
        workflow_dir=str(tmp_path), workflow_name="wf",
        module_copies=lambda name: {"trainer": 1}[name])
    main(ctx)
    worker.join(timeout=10)
    with diel.results.open(tmp_path / "wf.db") as results:
        assert [s["name"] for s in results.studies()] == ["wf"]
        assert len(results.trials()) == 2


def test_main_runs_a_search_on_the_memory_storage(tmp_path, capsys):
    """``database: memory://``: the master opens the in-memory store through
    get_storage, runs the search and prints its report from it; no file is written."""
    space = FakeSpace()
    worker = threading.Thread(target=serve_tasks, args=(space, "wf", 0, simple_trial),
                              daemon=True)
    worker.start()
    ctx = SimpleNamespace(
        name="search", copy=0, rank=0, space=space, log=logging.getLogger("t"),
        config={"space": {"lr": {"values": [0.1, 0.01]}}, "workers": "trainer",
                "database": "memory://"},
        workflow_dir=str(tmp_path), workflow_name="wf",
        module_copies=lambda name: {"trainer": 1}[name])
    main(ctx)
    worker.join(timeout=10)
    out = capsys.readouterr().out
    report = out[out.index("best 2 of study wf (grid exhausted):"):].splitlines()
    assert report[1].split()[:3] == ["number", "objective", "lr"]   # the searched one first
    assert sorted(line.split()[2] for line in report[3:5]) == ["0.01", "0.1"]
    assert list(tmp_path.iterdir()) == []


# an engine with no trial to recover, whose strategy does not learn from results (random)
IDLE = SimpleNamespace(recovering=False, sampler=SimpleNamespace(learns_from_results=False))


def test_auto_prefetch_queues_more_for_short_trials():
    loop = _Loop(FakeSpace(), IDLE, None, 1, "s", workers=4, mode="async", prefetch=None,
                 log=logging.getLogger("test"))
    assert loop.capacity() == 8                       # no trial finished yet: one queued each
    loop.pass_time, loop.trial_time = 0.002, 1.5      # real trials: still one queued each
    assert loop.capacity() == 8
    loop.trial_time = 0.0005                          # trials shorter than a pass: deeper
    assert loop.capacity() == 4 * (1 + 4)
    loop.trial_time = 1e-6
    assert loop.capacity() == 4 * (1 + MAX_PREFETCH)  # bounded
    fixed = _Loop(FakeSpace(), IDLE, None, 1, "s", workers=4, mode="async", prefetch=0,
                  log=logging.getLogger("test"))
    assert fixed.capacity() == 4
    batch = _Loop(FakeSpace(), IDLE, None, 1, "s", workers=4, mode="batch", prefetch=None,
                  log=logging.getLogger("test"))
    assert batch.capacity() == 4


def test_auto_prefetch_queues_nothing_ahead_for_a_strategy_that_learns():
    """tpe, gp, cmaes and nsga2 propose from the results so far: a task queued ahead
    would be chosen without the results that arrive while it waits."""
    from diel.search.samplers.registry import load_sampler

    assert [load_sampler(name, "strategy").learns_from_results
            for name in ("grid", "random", "qmc", "tpe", "gp", "cmaes", "nsga2")] == \
        [False, False, False, True, True, True, True]
    learning = SimpleNamespace(recovering=False, sampler=SimpleNamespace(learns_from_results=True))
    loop = _Loop(FakeSpace(), learning, None, 1, "s", workers=4, mode="async", prefetch=None,
                 log=logging.getLogger("test"))
    loop.pass_time, loop.trial_time = 0.002, 1e-6     # instant trials: still none queued
    assert loop.capacity() == 4
    asked = _Loop(FakeSpace(), learning, None, 1, "s", workers=4, mode="async", prefetch=2,
                  log=logging.getLogger("test"))
    assert asked.capacity() == 4 * (1 + 2)             # an explicit prefetch is obeyed


def test_the_lease_beats_between_slow_proposals(monkeypatch):
    """Four proposals of 0.2 s each (gp's are seconds past a few hundred trials) with a
    heartbeat due every 0.1 s: the lease is kept alive while they are made, not only
    after the pass."""
    from diel.search import master

    monkeypatch.setattr(master, "HEARTBEAT_S", 0.1)
    numbers = iter(range(4))

    def propose():
        time.sleep(0.2)
        return next((TrialStart(n, {"x": n}, f"k{n}") for n in numbers), None)
    engine = SimpleNamespace(recovering=False, running={}, next_trial=propose,
                             queued=lambda numbers, at: None, task=lambda n: {"trial": n},
                             unpromotable=lambda: [], take_notes=lambda: [],
                             sampler=SimpleNamespace(learns_from_results=True))
    beats = []
    store = SimpleNamespace(heartbeat=lambda lease: beats.append(time.monotonic()),
                            record=lambda *args: beats.append("commit"))
    loop = _Loop(FakeSpace(), engine, store, 1, "s", workers=8, mode="async", prefetch=0,
                 log=logging.getLogger("test"), lease=SimpleNamespace())
    loop.commit_and_dispatch()
    assert beats.index("commit") == 4     # a heartbeat after each of the four proposals
    assert [value["trial"] for _, value in loop.space.log] == [0, 1, 2, 3]


def proposing(numbers, learns: bool) -> SimpleNamespace:
    """An engine that proposes a trial for each of ``numbers`` (an iterator) and nothing
    after, running none; its strategy learns from results or not (``learns``)."""
    return SimpleNamespace(
        recovering=False, running={},
        next_trial=lambda: next((TrialStart(n, {}, f"k{n}") for n in numbers), None),
        queued=lambda numbers, at: None, task=lambda n: {"trial": n},
        unpromotable=lambda: [], take_notes=lambda: [],
        sampler=SimpleNamespace(learns_from_results=learns))


def test_a_pass_puts_its_tasks_in_one_message_after_its_commit():
    """The tasks of one pass go to the space in one tput_many (one message), in order,
    after the commit that records their trials as started."""
    numbers = iter(range(3))
    events: list = []

    class Space(FakeSpace):
        def tput_many(self, tag, values):
            events.append(("put", [value["trial"] for value in values]))
            super().tput_many(tag, values)

    engine = proposing(numbers, learns=False)
    def record(study, epochs=(), results=(), starts=(), started=(), checkpoints=(), suggested=()):
        events.append(("commit", [t.number for t in starts]))
    store = SimpleNamespace(record=record)
    loop = _Loop(Space(), engine, store, 1, "s", workers=4, mode="async", prefetch=0,
                 log=logging.getLogger("test"))
    loop.commit_and_dispatch()
    assert events == [("commit", [0, 1, 2]), ("put", [0, 1, 2])]


@pytest.mark.parametrize("learns", [True, False])
def test_a_learning_strategy_commits_the_results_before_it_proposes(learns):
    """A finished trial's result is committed before a slow strategy's proposals (a
    job killed meanwhile keeps it); a strategy that proposes in microseconds commits
    results and starts in one transaction."""
    numbers = iter(range(2))
    commits: list[tuple[list[int], list[int]]] = []
    engine = proposing(numbers, learns)
    def record(study, epochs=(), results=(), starts=(), started=(), checkpoints=(), suggested=()):
        commits.append(([r.number for r in results], [t.number for t in starts]))
    store = SimpleNamespace(record=record)
    loop = _Loop(FakeSpace(), engine, store, 1, "s", workers=2, mode="async", prefetch=0,
                 log=logging.getLogger("test"))
    loop.results = [ResultRecord(7, "ok", objective=0.5)]
    loop.propose_time = 1.0   # slow proposals (gp's, past a few hundred trials)
    loop.commit_and_dispatch()
    assert commits == ([([7], []), ([], [0, 1])] if learns else [([7], [0, 1])])


def _left_running(store, points, twice: list[int], once: list[int]) -> None:
    """Study ``s`` in ``store``, whose trials ``twice`` were dispatched twice and ``once``
    once, all left ``running`` as after crashes; trial 0 finished ok."""
    state = store.open_study("s", "grid", "accuracy", "maximize", {})
    store.record(state.study_id, starts=[TrialStart(i, points[i], param_key(points[i]))
                                        for i in [0, *twice, *once]])
    now = datetime.now(timezone.utc)   # workers took them: a crash is charged to each
    store.record(state.study_id, [], [ResultRecord(0, "ok", objective=0.5, accuracy=0.5)],
                 started=[StartedRecord(i, 0, now) for i in [*twice, *once]])
    # the first resume: dispatched again, taken, and the job died again
    state = store.open_study("s", "grid", "accuracy", "maximize", {}, max_attempts=5)
    store.record(state.study_id, starts=[TrialStart(i, points[i], param_key(points[i]))
                                        for i in twice])
    store.record(state.study_id, started=[StartedRecord(i, 0, now) for i in twice])


def test_resume_gives_up_a_trial_that_killed_the_job_and_queues_nothing_ahead(tmp_path,
                                                                               caplog):
    settings = {"space": GRID, "mode": "async", "prefetch": 2}
    points = parse_settings(settings, "search").space.grid()
    h = Harness(tmp_path, workers=1)
    with h.opened() as store:
        _left_running(store, points, twice=[1], once=[2, 3])

    def steady(params, report):
        time.sleep(0.03)
        return simple_trial(params, report)
    with caplog.at_level(logging.INFO, logger="diel.search"):
        h.run(settings, trial=steady)
    messages = [r.getMessage() for r in caplog.records]
    assert any("2 left running and 0 paused are run again (0 from a checkpoint), 1 given up"
               in m for m in messages)
    assert "trial 1 given up, recorded failed: the job died 2 times while this trial ran" \
        in messages
    trained = Counter(param_key(p) for p in h.trained)
    assert trained == Counter(param_key(points[i]) for i in [2, 3, *range(4, 9)])
    rows = {t["number"]: t for t in h.trials()}
    assert sorted(rows) == list(range(9))
    assert rows[1]["status"] == "failed" and rows[1]["attempts"] == 2
    assert rows[1]["error"] == "the job died 2 times while this trial ran"
    assert [rows[n]["attempts"] for n in (0, 2, 3, 4, 8)] == [1, 2, 2, 1, 1]
    assert {rows[n]["status"] for n in rows if n != 1} == {"ok"}
    # while trials 2 and 3 (re-queued after the crash) were pending, one task per worker;
    # afterwards the queue fills to workers * (1 + prefetch)
    outstanding, during, after, pending = 0, [], [], {2, 3}
    for kind, trial in _task_and_result_order(h.space):
        outstanding += 1 if kind == "task" else -1
        (during if pending else after).append(outstanding)
        if kind == "result":
            pending.discard(trial)
    assert max(during) == 1 and max(after) == 3


def test_capacity_is_one_task_per_worker_while_recovering(tmp_path):
    from diel.search.engine import SearchEngine
    settings = parse_settings({"space": GRID, "mode": "async", "prefetch": 2}, "search")
    points = settings.space.grid()
    store = MemoryStorage()
    _left_running(store, points, twice=[], once=[1, 2])
    state = store.open_study("s", "grid", "accuracy", "maximize", {})
    engine = SearchEngine(settings, state, seed=1)
    loop = _Loop(FakeSpace(), engine, None, state.study_id, "s", workers=4, mode="async",
                 prefetch=2, log=logging.getLogger("test"))
    assert engine.recovering and loop.capacity() == 4
    first, second = engine.next_trial(), engine.next_trial()
    assert {first.number, second.number} == {1, 2}
    engine.on_result({"trial": 1, "status": "ok", "accuracy": 0.5})
    assert engine.recovering and loop.capacity() == 4
    engine.withdraw(2)  # taken back: no longer pending
    assert not engine.recovering and loop.capacity() == 4 * (1 + 2)
    assert not SearchEngine(settings, StudyState(1, [], [], {}), seed=1).recovering


def test_main_takes_max_attempts_from_the_worker_settings(tmp_path, monkeypatch):
    from diel.search import master
    seen = []
    monkeypatch.setattr(master, "run_search", lambda *a, **kw: seen.append(kw["max_attempts"]))
    base = {"name": "search", "copy": 0, "rank": 0, "space": FakeSpace(),
            "log": logging.getLogger("t"),
            "config": {"space": {"lr": {"values": [0.1]}}, "workers": "trainer"},
            "workflow_dir": str(tmp_path), "workflow_name": "wf",
            "module_copies": lambda name: {"trainer": 1}[name]}
    master.main(SimpleNamespace(**base))  # a context without module_settings
    master.main(SimpleNamespace(**base, module_settings=lambda name: {"max_attempts": 1}))
    master.main(SimpleNamespace(**base, module_settings=lambda name: {}))
    assert seen == [2, 1, 2]
    with pytest.raises(ConfigError, match="modules.trainer.settings.max_attempts"):
        master.main(SimpleNamespace(**base, module_settings=lambda name: {"max_attempts": 0}))


def test_a_trial_queued_behind_a_busy_worker_starts_when_the_worker_takes_it(tmp_path):
    def slow(params, report):
        time.sleep(0.3)
        return simple_trial(params, report)
    h = Harness(tmp_path, workers=1)
    h.run({"space": {"lr": {"values": [0.1, 0.01, 0.001]}}, "prefetch": 1}, trial=slow)
    rows = {t["number"]: t for t in h.trials()}
    times = {n: (datetime.fromisoformat(t["queued_at"]),
                 datetime.fromisoformat(t["started_at"]) if t["started_at"] else None)
             for n, t in rows.items()}
    assert sorted(times) == [0, 1, 2]
    for number, (queued, started) in times.items():
        assert started is not None and started >= queued
    # trial 1 was queued while trial 0 ran (one task ahead of the one worker) and began
    # only when the worker was done with trial 0
    assert times[1][0] < datetime.fromisoformat(rows[0]["finished_at"])
    assert (times[1][1] - times[1][0]).total_seconds() >= 0.2
    assert all(row["worker"] == 0 for row in rows.values())


def test_the_engine_counts_running_trials_from_their_start_reports():
    from diel.search.engine import SearchEngine
    now = [0.0]
    settings = parse_settings({"space": GRID, "mode": "async"}, "search")
    engine = SearchEngine(settings, StudyState(1, [], [], {}), seed=1, clock=lambda: now[0])
    for _ in range(3):
        engine.next_trial()
    assert (engine.stats(2).running, engine.stats(2).queued) == (0, 3)
    queued = datetime(2024, 1, 1, 12, 0, tzinfo=timezone.utc)
    engine.queued([0, 1, 2], queued)
    took = queued.timestamp() + 3
    started = engine.on_start({"kind": "start", "trial": 0, "worker": 1, "at": took})
    assert (started.number, started.worker, started.at.timestamp()) == (0, 1, took)
    assert engine.on_start({"kind": "start", "trial": 0, "worker": 1, "at": took}) is None
    assert engine.on_start({"kind": "start", "trial": 99, "worker": 1}) is None  # unknown
    behind = engine.on_start({"trial": 1, "worker": "w", "at": queued.timestamp() - 2})
    assert behind.worker is None and behind.at == queued   # a slow clock: never before
    assert (engine.stats(2).running, engine.stats(2).queued) == (2, 1)
    outcome = engine.on_result({"trial": 0, "status": "ok", "accuracy": 0.5})
    assert outcome.record.started_at == started.at   # the result carries its start
    assert engine.on_start({"trial": 2, "at": float("nan")}).at > queued   # no time: now


def test_untaken_tasks_count_only_while_a_worker_is_free():
    from diel.search.engine import SearchEngine
    now = [0.0]
    settings = parse_settings({"space": GRID, "mode": "async"}, "search")
    engine = SearchEngine(settings, StudyState(1, [], [], {}), seed=1, clock=lambda: now[0])
    for _ in range(3):
        engine.next_trial()
    assert engine.untaken_for(2) == 0.0      # the clock starts now
    now[0] = 30.0
    assert engine.untaken_for(2) == 30.0     # two workers free, three tasks waiting
    engine.on_start({"trial": 0, "worker": 0, "at": 1.7e9})
    engine.on_start({"trial": 1, "worker": 1, "at": 1.7e9})
    now[0] = 500.0
    assert engine.untaken_for(2) == 0.0      # both workers busy: the third task may wait
    engine.on_result({"trial": 0, "status": "ok", "accuracy": 0.5})
    assert engine.untaken_for(2) == 0.0      # a worker is free from now on
    now[0] = 561.0
    assert engine.untaken_for(2) == 61.0 and engine.stats(2).untaken == 61.0


def test_a_master_whose_tasks_nobody_takes_says_so(tmp_path, caplog):
    """Workers serving another study take nothing: after a minute (a fake clock) the
    progress line and a warning name the tag the tasks wait on and what to check."""
    ticks = iter(range(0, 10_000, 2))
    out = io.StringIO()
    with caplog.at_level(logging.INFO, logger="diel.search"):
        summary = run_search(FakeSpace(), parse_settings({
            "strategy": "random", "space": {"x": {"uniform": [0, 1]}}, "max_trials": 10,
            "time_budget": 200, "progress_interval": 20}, "search"), MemoryStorage(), 2,
            study="s", out=out, poll=0.001, clock=lambda: float(next(ticks)))
    assert summary.stop_reason.startswith("time budget")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["search s: no worker has taken a task from tag s/task for 60 s while 4 "
                        "wait; check that the workers (module 'trainer') are running and serve "
                        "study 's'"]
    lines = out.getvalue().splitlines()
    noted = [line for line in lines if "no worker has taken a task from s/task" in line]
    assert noted and all(line.endswith("check the workers' module and study") for line in noted)
    assert not any("no worker has taken" in line for line in lines[:2])  # not before a minute
    assert "0 running, 4 queued" in noted[0]


def test_a_worker_that_cannot_load_its_function_ends_the_search_uncharged(tmp_path):
    """One worker runs a trial, the other cannot load the function: the master ends with
    a ConfigError at the worker's setting; the queued trials are gone, the running one
    stays ``running`` with its dispatch not charged, and the lease is free."""
    space = FakeSpace()
    release = threading.Event()

    def held(trial):
        release.wait(10)
        return {"accuracy": 0.5, "loss": 0.5}
    healthy = threading.Thread(target=serve_with, daemon=True,
                               args=(space, "s", 0, InProcessRunner(held)))
    healthy.start()
    store = MemoryStorage()

    def fail_once_running():
        while not any(one["kind"] == "start" for tag, value in space.log if tag == "s/report"
                      for one in flat(value)):
            time.sleep(0.01)
        space.tput("s/report", {"kind": "fatal", "worker": 1, "rank": 0, "setting": "run",
                                "error": "cannot load the trial function train.py:objective: "
                                         "ImportError: planted (at train.py:1)\ntraceback..."})
    threading.Thread(target=fail_once_running, daemon=True).start()
    try:
        with pytest.raises(ConfigError) as failure:
            run_search(space, parse_settings({"space": GRID, "prefetch": 2}, "search"), store,
                       2, study="s", out=io.StringIO(), poll=0.05)
    finally:
        release.set()
    healthy.join(timeout=10)
    assert str(failure.value) == ("modules.trainer.settings.run: cannot load the trial function "
                                  "train.py:objective: ImportError: planted (at train.py:1)")
    rows = store.trials("s")
    assert [(row["number"], row["status"], row["attempts"]) for row in rows] == \
        [(0, "running", 0)]
    store.release_lease(store.acquire_lease("s"))   # free: not StudyBusy


def test_what_a_worker_reports_is_bounded_before_it_is_stored_or_logged(tmp_path, caplog):
    huge = "x" * 20_000_000
    space = FakeSpace()

    def flood():
        task = space.tget("s/task")
        space.tput("s/report", {"kind": "result", "trial": task["trial"], "worker": 0,
                                "status": "failed", "error": "Boom: " + huge + " end",
                                "metrics": {"note": huge, "nested": {"deep": [huge]}}})
        space.tput("s/report", {"kind": "epoch", "trial": 77, "epoch": 1, "metrics": {"a": huge}})
        space.tput("s/report", {"kind": "nonsense", "blob": huge})
        while space.tget("s/task") is not None:
            pass
    threading.Thread(target=flood, daemon=True).start()
    store = MemoryStorage()
    with caplog.at_level(logging.INFO, logger="diel.search"):
        run_search(space, parse_settings({"space": {"x": {"values": [1]}}}, "search"), store, 1,
                   study="s", out=io.StringIO(), poll=0.05)
    [row] = store.trials("s")
    assert row["status"] == "failed" and len(row["error"]) == ERROR_CHARS
    assert row["error"].startswith("Boom: xxx") and row["error"].endswith("xxx end")
    assert len(row["metrics"]["note"]) == METRIC_TEXT_CHARS
    assert len(row["metrics"]["nested"]["deep"][0]) == METRIC_TEXT_CHARS
    messages = [r.getMessage() for r in caplog.records]
    assert max(len(m) for m in messages) <= ERROR_CHARS + 100
    assert any(m.startswith("ignoring a malformed report") for m in messages)
    assert any(m.startswith("ignoring an epoch report for no running trial") for m in messages)


def test_a_full_disk_ends_the_search_with_its_one_error_and_the_rerun_resumes(tmp_path, caplog):
    from sqlalchemy import event

    h = Harness(tmp_path, workers=2, sql=True)
    h.run({"space": GRID, "max_trials": 4})
    done_before = {t["number"] for t in h.trials(status="ok")}
    store = ResultsStore(h.url)
    commits = []

    def refuse(conn, cursor, statement, *args):   # from the third commit on, the disk is full
        if statement.startswith("UPDATE studies SET updated_at"):
            commits.append(statement)
        if len(commits) >= 3 and statement.startswith(("INSERT", "UPDATE", "DELETE")):
            raise sqlite3.OperationalError("database or disk is full")
    event.listen(store.db.engine, "before_cursor_execute", refuse)
    workers = [threading.Thread(target=serve_tasks, args=(h.space, "s", c, simple_trial),
                                daemon=True) for c in range(2)]
    for worker in workers:
        worker.start()
    with caplog.at_level(logging.DEBUG, logger="diel.search"), \
            pytest.raises(DatabaseUnwritable, match="could not be written: disk full"):
        run_search(h.space, parse_settings({"space": GRID}, "search"), store, 2, study="s",
                   out=io.StringIO(), poll=0.05)
    store.close()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # lease kept quiet
    conn = sqlite3.connect(h.url.removeprefix("sqlite:///"))
    conn.execute("DELETE FROM study_leases")   # as a rerun takes over a dead run's lease
    conn.commit()
    conn.close()
    h.run({"space": GRID})   # the disk has room again: the same study resumes, and ends
    rows = h.trials()
    assert len(rows) == 9 and {t["status"] for t in rows} == {"ok"}
    assert done_before <= {t["number"] for t in rows}
