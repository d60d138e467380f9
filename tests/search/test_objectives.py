"""Several objectives: ``objectives: {EXPR: DIRECTION, ...}`` parsed beside the single
``objective``/``direction`` form (every mistake a ConfigError at its key path), which
strategies take them, the engine's values per trial, its front and resume rescoring, and
the master's final report of the Pareto front (a fake tuple space, worker threads)."""

from __future__ import annotations

import io
import logging
import math
import threading

import pytest
import yaml

import diel.results
from diel.errors import ConfigError
from diel.results import MemoryStorage, StoredTrial, StudyState, get_storage
from diel.search import parse_settings, run_search
from diel.search.master import SearchSummary
from diel.search.engine import SearchEngine, observation, rescored
from diel.search.objective import BASE_METRICS, parse_objectives
from diel.search.progress import describe
from diel.search.samplers import Sampler
from tests.helpers.fakespace import FakeSpace
from tests.helpers.search import serve_tasks

PATH = "modules.search.settings"


def test_the_single_form_is_one_objective():
    default = parse_objectives({}, PATH, BASE_METRICS)
    assert default.specs == (("accuracy", "maximize"),) and not default.several
    low = parse_objectives({"objective": "loss", "direction": "minimize"}, PATH, BASE_METRICS)
    assert low.specs == (("loss", "minimize"),) and low.first.direction == "minimize"
    assert low.values({"loss": 0.25}) == (0.25,)


def test_several_objectives_keep_their_order_and_directions():
    objectives = parse_objectives({"objectives": {"accuracy - 0.001 * time": "maximize",
                                                  "time": "minimize", "f1": "maximize"}},
                                  PATH, [*BASE_METRICS, "f1"])
    assert objectives.several and len(objectives) == 3
    assert objectives.specs == (("accuracy - 0.001 * time", "maximize"), ("time", "minimize"),
                                ("f1", "maximize"))
    assert objectives.directions == ["maximize", "minimize", "maximize"]
    assert objectives.first.text == "accuracy - 0.001 * time"
    values = objectives.values({"accuracy": 0.9, "time": 100.0})
    assert values[0] == pytest.approx(0.8) and values[1] == 100.0 and values[2] is None
    assert math.isnan(parse_objectives({"objectives": {"accuracy / time": "maximize"}}, PATH,
                                       BASE_METRICS).values({"accuracy": 1, "time": 0})[0])
    one = parse_objectives({"objectives": {"loss": "minimize"}}, PATH, BASE_METRICS)
    assert one.specs == (("loss", "minimize"),) and not one.several


@pytest.mark.parametrize("settings, path, words", [
    ({"objectives": {"accuracy": "maximize"}, "objective": "loss"}, "objectives",
     "give either objectives (each expression with its direction) or objective and "
     "direction, not both; this search also has objective"),
    ({"objectives": {"accuracy": "maximize"}, "direction": "minimize"}, "objectives",
     "not both; this search also has direction"),
    ({"objectives": ["accuracy", "time"]}, "objectives",
     "expected a mapping of expressions to directions, e.g. {accuracy: maximize, time: "
     "minimize}; got ['accuracy', 'time']"),
    ({"objectives": {}}, "objectives", "expected a mapping of expressions to directions"),
    ({"objectives": None}, "objectives", "expected a mapping of expressions to directions"),
    ({"objectives": {"accuracy": "maximise", "time": "minimize"}}, "objectives.accuracy",
     "expected maximize or minimize; got 'maximise' (did you mean 'maximize'?)"),
    ({"objectives": {"accuracy": "maximize", "time": None}}, "objectives.time",
     "expected maximize or minimize; got None"),
    ({"objectives": {"acuracy": "maximize", "time": "minimize"}}, "objectives.acuracy",
     "unknown name 'acuracy' (did you mean 'accuracy'?); known: accuracy, epoch, loss, time"),
    ({"objectives": {"accuracy -": "maximize"}}, "objectives['accuracy -']", "cannot parse"),
    ({"objectives": {"accuracy": "maximize", "accuracy ": "minimize"}},
     "objectives['accuracy ']", "the same objective as 'accuracy'; each objective once"),
    ({"objectives": {"time - loss": "maximize", "time-loss": "minimize"}},
     "objectives['time-loss']", "the same objective as 'time - loss'"),
    ({"direction": "minimise"}, "direction",
     "expected maximize or minimize; got 'minimise' (did you mean 'minimize'?)"),
    ({"objective": "los"}, "objective", "unknown name 'los' (did you mean 'loss'?)"),
])
def test_mistakes_name_their_key_path(settings, path, words):
    with pytest.raises(ConfigError) as info:
        parse_objectives(settings, PATH, BASE_METRICS)
    assert info.value.path == f"{PATH}.{path}"
    assert words in info.value.message


# -- several objectives in the settings, the engine and the master --------------------

TWO = {"accuracy": "maximize", "cost": "minimize"}
GRID = {"x": {"range": [0, 5], "step": 1}, "y": {"values": [0, 1]}}
FRONT_XY = [(3, 0), (2, 0), (1, 0), (0, 0)]   # best accuracy first


def settings(**extra) -> dict:
    return {"space": GRID, "metrics": ["cost"], "objectives": TWO, **extra}


def measure(params: dict, report) -> dict:
    """Accuracy peaks at x = 3; cost grows with x and y: the front is x = 0..3, y = 0."""
    accuracy = 1 - abs(params["x"] - 3) / 10 - params["y"] / 100
    report(1, {"accuracy": accuracy / 2})
    return {"accuracy": accuracy, "loss": 1 - accuracy, "cost": params["x"] + params["y"]}


@pytest.mark.parametrize("strategy", ["grid", "random", "{tpe: {n_startup_trials: 2}}", "gp",
                                      "qmc", "nsga2"])
def test_strategies_that_take_several_objectives(strategy):
    parsed = parse_settings(settings(strategy=yaml.safe_load(strategy), max_trials=4), PATH)
    assert parsed.objectives.specs == (("accuracy", "maximize"), ("cost", "minimize"))
    assert parsed.objective.text == "accuracy" and parsed.prune_metric is None


@pytest.mark.parametrize("given, path, words", [
    ({"strategy": "cmaes", "space": {"x": {"uniform": [0, 1]}}}, "strategy",
     "strategy cmaes optimizes one objective; this search has 2"),
    ({"objective": "accuracy"}, "objectives", "not both; this search also has objective"),
    ({"stop_when": "objective > 0.9"}, "stop_when",
     "this search has 2 objectives, so 'objective' names none of them; compare a metric"),
    ({"objectivs": TWO}, "objectivs", "unknown setting; did you mean objectives? known:"),
])
def test_several_objectives_mistakes(given, path, words):
    with pytest.raises(ConfigError) as info:
        parse_settings({**settings(max_trials=4), **given}, PATH)
    assert info.value.path == f"{PATH}.{path}" and words in info.value.message


def test_one_objective_given_a_mapping_points_to_objectives():
    with pytest.raises(ConfigError) as info:
        parse_settings({"space": GRID, "objective": TWO}, PATH)
    assert info.value.path == f"{PATH}.objective"
    assert "did you mean objectives: {accuracy: maximize, time: minimize}?" in info.value.message


class Recorder(Sampler):
    """Proposes the grid in order and records what it is told."""

    def restore(self, trials):
        self.restored = [(t.number, t.values) for t in trials]
        self.told: list[tuple] = []
        self.points = self.space.grid()

    def propose(self, number):
        return self.points[number] if number < len(self.points) else None

    def tell(self, number, params, values, status):
        self.told.append((number, values, status))


def engine_for(parsed, state=None) -> SearchEngine:
    sampler = Recorder(parsed.space, parsed.objectives.directions, 1, {}, "async")
    return SearchEngine(parsed, state or StudyState(1, [], [], {}), seed=1, sampler=sampler)


def result(number: int, **fields) -> dict:
    return {"kind": "result", "trial": number, "status": "ok", **fields}


def test_the_engine_computes_each_value_stores_and_tells_them():
    engine = engine_for(parse_settings(settings(), PATH))
    starts = [engine.next_trial() for _ in range(4)]
    assert [s.params for s in starts][:2] == [{"x": 0, "y": 0}, {"x": 0, "y": 1}]
    ok = engine.on_result(result(0, accuracy=0.7, time=1.0, metrics={"cost": 0}))
    assert (ok.record.status, ok.record.objective, ok.record.objective_values) == \
        ("ok", 0.7, (0.7, 0.0))
    lacking = engine.on_result(result(1, accuracy=0.69, time=1.0))
    assert lacking.record.status == "failed" and lacking.record.objective_values is None
    assert lacking.record.error == "the result lacks a metric the objective 'cost' needs"
    one = engine.on_result(result(2, value=0.5))
    assert one.record.status == "failed" and one.record.error == (
        "the trial returned one number (0.5) but the search has 2 objectives; return a "
        "mapping of the metrics they use")
    pruned = engine.on_result(result(3, status="pruned", accuracy=0.4, metrics={"cost": 1}))
    assert pruned.record.objective_values == (0.4, 1.0)
    engine.next_trial()   # the results are told before the next proposal, in number order
    assert engine.sampler.told == [(0, (0.7, 0.0), "ok"), (1, None, "failed"),
                                   (2, None, "failed"), (3, (0.4, 1.0), "pruned")]
    stats = engine.stats()
    assert (stats.best, stats.front) == (None, 1)
    assert "Pareto front 1 trial" in describe("s", stats) and "best" not in describe("s", stats)


def test_the_progress_front_and_a_metric_threshold_with_several_objectives():
    engine = engine_for(parse_settings(settings(stop_when="accuracy >= 0.95"), PATH))
    for number, (accuracy, cost) in enumerate([(0.8, 1), (0.9, 2), (0.85, 3), (0.9, 2)]):
        engine.next_trial()
        engine.on_result(result(number, accuracy=accuracy, metrics={"cost": cost}))
    assert engine.stats().front == 3 and engine.stop_reason is None   # a tie counts twice
    engine.next_trial()
    engine.on_result(result(4, accuracy=0.97, metrics={"cost": 9}))
    assert engine.stop_reason == "stop_when (accuracy >= 0.95) met by trial 4"
    assert engine.stats().front == 4


def stored(number: int, status: str, objective=None, values=None, **metrics) -> StoredTrial:
    return StoredTrial(number, {"x": number, "y": 0}, str(number), status, objective, metrics,
                       objective_values=values)


def test_a_resumed_engine_restores_values_and_the_front():
    parsed = parse_settings(settings(), PATH)
    state = StudyState(1, [stored(0, "ok", 0.7, (0.7, 0.0)), stored(1, "ok", 0.6, (0.6, 1.0)),
                           stored(2, "failed")], [stored(3, "running")], {},
                       objectives=parsed.objectives.specs)
    engine = engine_for(parsed, state)
    assert engine.sampler.restored == [(0, (0.7, 0.0)), (1, (0.6, 1.0)), (2, None), (3, None)]
    assert engine.stats().front == 1
    assert observation(stored(5, "ok", 0.7), count=2).values is None   # values missing


def test_rescored_recomputes_each_value_when_the_objectives_change():
    single = StudyState(1, [stored(0, "ok", 0.7, accuracy=0.7, cost=3), stored(1, "failed"),
                            stored(2, "pruned", 0.1, accuracy=0.1)], [], {},
                        objective="accuracy", direction="maximize",
                        objectives=(("accuracy", "maximize"),))
    two = parse_settings(settings(), PATH)
    assert rescored(two, single) == {0: (0.7, 3.0), 1: None, 2: (0.1, None)}
    same = StudyState(1, [], [], {}, objective="accuracy", direction="maximize",
                      objectives=two.objectives.specs)
    assert rescored(two, same) is None
    turned = parse_settings(settings(objectives={"accuracy": "maximize", "cost": "maximize"}),
                            PATH)
    assert rescored(turned, same) == {}   # only a direction: the values stay


class Search:
    """A search over a fake tuple space with worker threads, on one results store for
    every run: in memory, or with ``sql`` a SQLite file (whose readers the test uses)."""

    def __init__(self, tmp_path, sql: bool = False) -> None:
        self.database = f"sqlite:///{tmp_path / 'results.db'}" if sql else MemoryStorage()

    def run(self, given: dict) -> tuple[SearchSummary, str]:
        space, out = FakeSpace(), io.StringIO()
        threads = [threading.Thread(target=serve_tasks, args=(space, "s", c, measure),
                                    daemon=True) for c in range(2)]
        for t in threads:
            t.start()
        store = get_storage(self.database)
        try:
            summary = run_search(space, parse_settings(given, PATH), store, 2, study="s",
                                 out=out, poll=0.05, log=logging.getLogger("diel.search"))
        finally:
            store.close()
        for t in threads:
            t.join(timeout=10)
        return summary, out.getvalue()


def front_of(rows) -> list[tuple]:
    return [(row["params"]["x"], row["params"]["y"]) for row in rows]


def test_a_search_of_two_objectives_stores_them_and_reports_the_front(tmp_path):
    summary, out = Search(tmp_path, sql=True).run(settings())
    assert front_of(summary.best) == FRONT_XY
    report = out[out.index("Pareto front of study s"):]
    assert report.splitlines()[0] == (
        "Pareto front of study s (grid exhausted): 4 trials that no other beats in every "
        "objective ('accuracy' (maximize), 'cost' (minimize)):")
    assert report.splitlines()[1].split()[:5] == ["number", "accuracy", "cost", "x", "y"]
    assert len(report.strip().splitlines()) == 3 + 4   # the title, the header, a rule, 4 rows
    with diel.results.open(tmp_path / "results.db") as results:
        rows = results.trials(study="s")
        assert front_of(results.pareto(study="s")) == FRONT_XY
    assert len(rows) == 12 and all(row["objectives"]["cost"] == row["metrics"]["cost"]
                                   for row in rows)
    summary, out = Search(tmp_path, sql=True).run(settings(report_top=2))   # resumed: nothing to run
    assert front_of(summary.best) == FRONT_XY[:2]
    assert "Pareto front of study s (grid exhausted): the first 2 of 4 trials" in out


def test_changed_objectives_rescore_the_stored_trials_on_resume(tmp_path, caplog):
    search = Search(tmp_path, sql=True)
    single = {"space": GRID, "metrics": ["cost"], "objective": "accuracy"}
    search.run(single)
    with caplog.at_level(logging.INFO, logger="diel.search"):
        summary, out = search.run(settings())
    assert "study s: objectives changed from 'accuracy' (maximize) to 'accuracy' (maximize), " \
           "'cost' (minimize); recomputed the objectives of 12 stored trial(s) from their " \
           "metrics" in caplog.text
    assert front_of(summary.best) == FRONT_XY
    with diel.results.open(tmp_path / "results.db") as results:
        assert front_of(results.pareto(study="s")) == FRONT_XY
        [study] = results.studies()
    assert (study["front"], study["best"]) == (4, None)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="diel.search"):
        summary, out = search.run({**single, "objective": "cost", "direction": "minimize"})
    assert "objectives changed from 'accuracy' (maximize), 'cost' (minimize) to 'cost' " \
           "(minimize)" in caplog.text
    assert [row["objective"] for row in summary.best][:2] == [0.0, 1.0]
    assert out.splitlines()[-2 - len(summary.best)].startswith("number  objective  x  y")
    with diel.results.open(tmp_path / "results.db") as results:
        assert "objectives" not in results.trials(study="s")[0]
        with pytest.raises(ValueError, match="has one objective"):
            results.pareto(study="s")


@pytest.mark.parametrize("strategy", [{"tpe": {"n_startup_trials": 3}}, "nsga2", "random"])
def test_model_based_strategies_search_two_objectives(tmp_path, strategy):
    space = {"x": {"uniform": [0, 5]}, "y": {"values": [0, 1]}}
    search = Search(tmp_path)
    summary, out = search.run(settings(strategy=strategy, space=space, seed=3, max_trials=8,
                                       mode="batch"))
    rows = search.database.trials("s", "ok")
    assert len(rows) == 8 and summary.stop_reason == "max_trials (8) reached"
    points = [(row["objectives"]["accuracy"], row["objectives"]["cost"]) for row in rows]
    expected = {rows[i]["number"] for i in diel.results.pareto_front(points, ["maximize",
                                                                              "minimize"])}
    assert {row["number"] for row in summary.best} == expected
    assert f"Pareto front of study s (max_trials (8) reached): {len(expected)} trial" in out
