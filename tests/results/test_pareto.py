"""Studies of several objectives in the results database: the Pareto front function, the
values stored per trial (SQLite and PostgreSQL), ``Results.pareto`` and ``diel results
--pareto`` with its mistakes, and ``diel studies``' front column."""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import random

import pytest

import diel.results
from diel.results import ParetoFront, ResultRecord, ResultsStore, TrialStart, format_studies, \
    pareto_front
from diel.results.cli import register
from tests.helpers.launch import run_diel, run_diel_in_process

MAX_MIN = ["maximize", "minimize"]
# number, activation, status, (accuracy, time): accuracy is maximized, time minimized
TRIALS = [
    (0, "tanh", "ok", (0.90, 10.0)),      # front
    (1, "relu", "ok", (0.80, 5.0)),       # front
    (2, "relu", "ok", (0.95, 20.0)),      # front
    (3, "relu", "ok", (0.85, 12.0)),      # dominated by 0 (not among relu trials)
    (4, "tanh", "ok", (0.90, 10.0)),      # the same values as 0: both on the front
    (5, "relu", "ok", (0.70, 5.0)),       # dominated by 1 (as fast, less accurate)
    (6, "relu", "failed", None),
    (7, "relu", "pruned", (0.99, 1.0)),   # would dominate every trial, but not ok
    (8, "tanh", "running", None),
]
FRONT = [2, 0, 4, 1]  # best accuracy first, ties by number


def dominates(a, b, directions) -> bool:
    better = [(x > y) if d == "maximize" else (x < y) for x, y, d in zip(a, b, directions)]
    worse = [(x < y) if d == "maximize" else (x > y) for x, y, d in zip(a, b, directions)]
    return any(better) and not any(worse)


# -- the front itself ----------------------------------------------------------------
def test_the_front_keeps_ties_and_mixes_directions():
    points = [values for *_, values in TRIALS[:6]]
    assert pareto_front(points, MAX_MIN) == [0, 1, 2, 4]
    assert pareto_front(points, ["minimize", "maximize"]) == [2, 3, 5]  # the other corner
    assert pareto_front(points, ["maximize", "maximize"]) == [2]
    assert pareto_front(points, ["minimize", "minimize"]) == [5]
    assert pareto_front([(1.0, 2.0)] * 3, MAX_MIN) == [0, 1, 2]       # all tied
    assert pareto_front([(1.0, 2.0), (1.0, 3.0)], MAX_MIN) == [0]     # equal in one, better in one
    assert pareto_front([(3.0,), (5.0,), (5.0,)], ["maximize"]) == [1, 2]  # one objective: the best


def test_points_without_finite_values_are_on_no_front():
    points = [(None, 1.0), (0.5, math.nan), (math.inf, 0.0), (0.1, 9.0), (True, 0.0)]
    assert pareto_front(points, MAX_MIN) == [3]
    assert pareto_front([], MAX_MIN) == []
    assert pareto_front([(None, None)], MAX_MIN) == []


@pytest.mark.parametrize("points, directions, words", [
    ([(1.0, 2.0)], ["maximize", "up"], "direction must be maximize or minimize"),
    ([(1.0, 2.0), (1.0,)], MAX_MIN, "point 1 has 1 values for 2 objectives"),
    ([(1.0,)], [], "at least one objective"),
])
def test_the_front_refuses_malformed_input(points, directions, words):
    with pytest.raises(ValueError, match=words):
        pareto_front(points, directions)


def test_the_front_agrees_with_the_definition_on_random_points():
    rng = random.Random(5)
    for directions in itertools.product(("maximize", "minimize"), repeat=3):
        points = [tuple(float(rng.randint(0, 4)) for _ in range(3)) for _ in range(60)]
        expected = [i for i, p in enumerate(points)
                    if not any(dominates(q, p, directions) for q in points)]
        assert pareto_front(points, directions) == expected


def test_a_front_kept_as_points_come_agrees_with_the_whole_list():
    front = ParetoFront(MAX_MIN)
    assert [front.add(n, values) for n, _, status, values in TRIALS[:6]] == \
        [True, True, True, False, True, False]
    assert sorted(front.keys) == [0, 1, 2, 4] and len(front) == 4
    assert front.add(9, (0.99, 1.0)) and front.keys == [9]    # dominates every one
    assert not front.add(10, (None, 0.0)) and front.keys == [9]
    rng = random.Random(8)
    points = [(rng.random(), float(rng.randint(0, 9))) for _ in range(200)]
    order = list(range(200))
    rng.shuffle(order)
    shuffled: ParetoFront[int] = ParetoFront(MAX_MIN)
    for index in order:
        shuffled.add(index, points[index])
    assert sorted(shuffled.keys) == pareto_front(points, MAX_MIN)


# -- a study of two objectives in the database ---------------------------------------
def fill(url: str) -> str:
    """Study ``mo`` (accuracy up, time down; TRIALS) and study ``single`` (accuracy)."""
    store = ResultsStore(url)
    state = store.open_study("mo", "random", "accuracy", "maximize", {},
                             objectives=[("accuracy", "maximize"), ("time", "minimize")])
    store.record(state.study_id, starts=[
        TrialStart(n, {"lr": 0.1 * (n + 1), "activation": act}, str(n)) for n, act, *_ in TRIALS])
    store.record(state.study_id, results=[
        ResultRecord(n, status, values[0] if values else None,
                     time=values[1] if values else None, accuracy=values[0] if values else None,
                     objective_values=values, error="boom" if status == "failed" else None)
        for n, _, status, values in TRIALS if status != "running"])
    single = store.open_study("single", "grid", "accuracy", "maximize", {})
    store.record(single.study_id, starts=[TrialStart(0, {"lr": 0.1}, "0")])
    store.record(single.study_id, results=[ResultRecord(0, "ok", 0.5, accuracy=0.5)])
    store.close()
    return url


@pytest.fixture
def several_db(db_url) -> str:
    return fill(db_url)


@pytest.fixture(scope="module")
def shared_several_db(module_databases) -> str:
    """``several_db`` written once per module and backend, for the tests that only read."""
    return fill(module_databases())


def test_each_value_is_stored_and_read_back(several_db):
    store = ResultsStore(several_db)
    state = store.open_study("mo", "random", "accuracy", "maximize", {})
    assert state.objectives == (("accuracy", "maximize"), ("time", "minimize"))
    scores = {t.number: t.scores for t in state.finished}
    assert scores[0] == (0.90, 10.0) and scores[7] == (0.99, 1.0)
    single = store.open_study("single", "grid", "accuracy", "maximize", {})
    assert single.objectives == (("accuracy", "maximize"),)
    assert single.finished[0].scores == (0.5,) and single.finished[0].objective_values is None
    store.record(state.study_id, starts=[TrialStart(0, {"lr": 0.1, "activation": "tanh"}, "0")])
    again = store.open_study("mo", "random", "accuracy", "maximize", {}, max_attempts=5)
    store.close()
    assert [t.objective_values for t in again.running if t.number == 0] == [None]  # a re-run
    with diel.results.open(several_db) as results:
        rows = {t["number"]: t for t in results.trials(study="mo")}
        assert rows[2]["objectives"] == {"accuracy": 0.95, "time": 20.0}
        assert rows[6]["objectives"] == {"accuracy": None, "time": None}
        assert "objectives" not in results.trials(study="single")[0]


def test_objectives_must_start_with_the_objective(tmp_path):
    store = ResultsStore(f"sqlite:///{tmp_path / 'x.db'}")
    try:
        with pytest.raises(ValueError, match="must be the objective 'loss'"):
            store.open_study("s", "random", "loss", "minimize", {},
                             objectives=[("accuracy", "maximize"), ("loss", "minimize")])
    finally:
        store.close()


def test_non_finite_values_are_stored_as_none(tmp_path):
    url = f"sqlite:///{tmp_path / 'n.db'}"
    store = ResultsStore(url)
    state = store.open_study("s", "random", "a", "maximize", {}, objectives=[
        ("a", "maximize"), ("b", "minimize")])
    store.record(state.study_id, starts=[TrialStart(0, {}, "0")])
    store.record(state.study_id, results=[ResultRecord(0, "pruned", 1.0,
                                                       objective_values=(1.0, math.nan))])
    store.close()
    with diel.results.open(url) as results:
        assert results.trials()[0]["objectives"] == {"a": 1.0, "b": None}


def test_the_front_of_a_study(shared_several_db):
    with diel.results.open(shared_several_db) as results:
        assert [t["number"] for t in results.pareto(study="mo")] == FRONT
        assert [t["number"] for t in results.pareto()] == FRONT   # the one study of several
        assert [t["number"] for t in results.pareto(study="mo", objectives=["time"])] == [1, 5]
        assert [t["number"] for t in results.pareto(study="mo", where=["activation=relu"])] \
            == [2, 3, 1]
        assert [t["number"] for t in results.pareto(study="mo", sort="time")] == [1, 0, 4, 2]
        assert [t["number"] for t in results.pareto(study="mo", top=2)] == [2, 0]
        studies = {s["name"]: s for s in results.studies()}
    assert studies["mo"]["front"] == 4 and studies["mo"]["best"] is None
    assert studies["mo"]["objectives"] == [{"expression": "accuracy", "direction": "maximize"},
                                           {"expression": "time", "direction": "minimize"}]
    assert studies["single"]["front"] is None and studies["single"]["best"] == 0.5
    lines = format_studies(list(studies.values())).splitlines()
    assert lines[0].split()[9:11] == ["best", "front"]
    assert "maximize, minimize" in lines[2] and "accuracy, time" in lines[2]


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="diel")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_diel_results_pareto_prints_only_the_front(shared_several_db, capsys):
    assert run("results", shared_several_db, "--pareto") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["number", "status", "objectives.accuracy", "objectives.time"]
    assert [int(line.split()[0]) for line in lines[2:]] == FRONT
    assert all(line.split()[1] == "ok" for line in lines[2:])
    assert run("results", shared_several_db, "--pareto", "--study", "mo", "--format", "json",
               "--objective", "time", "--objective", "accuracy") == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["number"] for r in rows] == [1, 0, 4, 2]   # best time first
    assert rows[0]["objectives"] == {"accuracy": 0.8, "time": 5.0}
    assert run("results", shared_several_db, "--pareto", "--where", "lr>10") == 0
    assert capsys.readouterr().err == "no trials match\n"


@pytest.mark.parametrize("argv, words", [
    (["--study", "single"], "study 'single' has one objective, 'accuracy' (maximize); a "
                            "Pareto front needs a study of several"),
    (["--objective", "tme"], "study 'mo' has no objective 'tme' (did you mean 'time'?); its "
                             "objectives: 'accuracy' (maximize), 'time' (minimize)"),
    (["--objective", "time", "--objective", "time "], "objective 'time ' is named twice"),
    (["--study", "nope"], "no study 'nope' in "),
    (["--status", "failed"], "--pareto lists ok trials only, not --status failed"),
    (["--where", "lrr<1"], "unknown key 'lrr' in filter"),
])
def test_pareto_mistakes_exit_2_with_one_line(shared_several_db, capsys, argv, words):
    assert run("results", shared_several_db, "--pareto", *argv) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_objective_needs_pareto(shared_several_db, capsys):
    assert run("results", shared_several_db, "--objective", "time") == 2
    assert "--objective chooses the objectives of --pareto" in capsys.readouterr().err


def test_pareto_on_a_database_of_single_objective_studies_exits_2(shared_db, capsys):
    assert run("results", str(shared_db), "--pareto") == 2
    assert "has several objectives; a Pareto front needs one" in capsys.readouterr().err


def test_the_pareto_command_reads_without_writing(tmp_path):
    path = tmp_path / "mo.db"
    fill(f"sqlite:///{path}")
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    done = run_diel("results", str(path), "--pareto", "--format", "csv", timeout=60)
    assert done.returncode == 0, done.stderr
    assert [line.split(",")[0] for line in done.stdout.splitlines()[1:]] == \
        [str(n) for n in FRONT]
    done = run_diel_in_process("results", str(path), "--pareto", "--study", "single")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("diel results: error: study 'single' has one objective")
    done = run_diel_in_process("studies", str(path))
    assert done.returncode == 0 and "front" in done.stdout.splitlines()[0]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
