"""Define-by-run and conditional spaces: ``trial.suggest_*`` (Optuna's vocabulary on
diel's trial), ``when:`` in a declared space, the master's answers, and a resumed
sampler rebuilt from the stored distributions (in one process: a fake tuple space and
worker threads)."""

from __future__ import annotations

import io
import threading

import pytest

from diel.errors import ConfigError
from diel.results import MemoryStorage
from diel.search import parse_settings, run_search
from diel.search.distributions import categorical_distribution, float_distribution, \
    int_distribution
from diel.search.engine import SearchEngine
from diel.search.samplers import Observation
from diel.search.space import GRID_KINDS, parse_space
from diel.search.suggest import Suggestions
from diel.worker import Trial
from diel.worker.inprocess import InProcessRunner
from diel.worker.outcome import run_objective
from diel.worker.serve import serve_tasks
from diel.worker.trial import SuggestFailed
from tests.helpers.fakespace import FakeSpace

PATH = "modules.search.settings.space"
CONDITIONAL = {
    "classifier": {"choice": ["SVC", "LinearSVC", "RF"]},
    "svc_c": {"logrange": [1e-2, 1e2], "num": 5, "when": {"classifier": ["SVC", "LinearSVC"]}},
    "kernel": {"values": ["rbf", "poly"], "when": {"classifier": "SVC"}},
    "degree": {"values": [2, 3, 4], "when": {"kernel": "poly"}},
    "depth": {"range": [2, 8], "step": 2, "when": {"classifier": "RF"}},
    "seed": {"values": [1, 2]},
}


# -- declared conditional spaces ---------------------------------------------------------

def test_a_conditional_grid_enumerates_only_valid_combinations():
    space = parse_space(CONDITIONAL, PATH)
    grid = space.grid()
    # SVC: 5 C x (rbf + 3 poly degrees) = 20; LinearSVC: 5; RF: 4 depths; x 2 seeds
    assert len(grid) == space.grid_size() == (20 + 5 + 4) * 2
    assert len({tuple(sorted(p.items())) for p in grid}) == len(grid)
    for point in grid:
        assert ("svc_c" in point) == (point["classifier"] != "RF")
        assert ("kernel" in point) == (point["classifier"] == "SVC")
        assert ("degree" in point) == (point.get("kernel") == "poly")
        assert ("depth" in point) == (point["classifier"] == "RF")


def test_random_draws_leave_inactive_parameters_out():
    space = parse_space(CONDITIONAL, PATH)
    draws = [space.sample(3, n) for n in range(60)]
    assert {d["classifier"] for d in draws} == {"SVC", "LinearSVC", "RF"}
    for draw in draws:
        assert ("depth" in draw) == (draw["classifier"] == "RF")
        assert ("degree" in draw) == (draw.get("kernel") == "poly")


@pytest.mark.parametrize("when, words", [
    ({"model": "SVC"}, "names no parameter declared before this one"),
    ({"seed": 1}, "1 is not one of seed's values (2)"),
    ({"classifier": "KNN"}, "'KNN' is not one of classifier's values"),
    ({"lr": 0.1}, "lr is a uniform parameter; a condition names a values or choice"),
    ("SVC", "expected a mapping of parent parameters"),
])
def test_bad_conditions_name_their_key(when, words):
    spec = {"classifier": {"choice": ["SVC", "RF"]}, "seed": {"values": [2]},
            "lr": {"uniform": [0.0, 1.0]}, "c": {"uniform": [0.0, 1.0], "when": when}}
    with pytest.raises(ConfigError) as info:
        parse_space(spec, PATH)
    assert info.value.path.startswith(f"{PATH}.c.when")
    assert words in info.value.message


def test_grid_needs_a_declared_space_and_says_the_way_out():
    with pytest.raises(ConfigError) as info:
        parse_settings({"strategy": "grid"}, "s")
    assert info.value.path == "s.space"
    assert "strategy grid needs a declared space" in info.value.message
    assert "random, tpe" in info.value.message
    assert parse_settings({"strategy": "tpe", "max_trials": 3}, "s").space.names == []


@pytest.mark.parametrize("strategy", ["tpe", "random", "qmc", "nsga2"])
def test_samplers_honour_conditions(strategy):
    settings = parse_settings({"strategy": strategy, "max_trials": 30, "seed": 1,
                               "space": CONDITIONAL}, "s")
    engine = SearchEngine(settings, MemoryStorage().open_study("s", strategy, "accuracy",
                                                               "maximize", {}, 2), 1)
    for number in range(12):
        params = engine.sampler.propose(number)
        assert ("depth" in params) == (params["classifier"] == "RF"), params
        assert ("degree" in params) == (params.get("kernel") == "poly"), params
        engine.sampler.tell(number, params, (float(number),), "ok")


# -- the trial's Optuna vocabulary -----------------------------------------------------

def test_report_tells_optunas_form_from_diels():
    seen = []
    trial = Trial(params={}, number=0, study="s", _reporter=lambda s, m: seen.append((s, m)))
    trial.report(0.5, 3)                    # Optuna: (value, step)
    trial.report(0.6, step=4)               # Optuna: step by keyword
    trial.report(value=0.7, step=5)         # both read it alike
    trial.report(6, loss=0.1)               # diel: (step, **metrics)
    trial.report(step=7, loss=0.2, accuracy=0.9)
    assert seen == [(3, {"value": 0.5}), (4, {"value": 0.6}), (5, {"value": 0.7}),
                    (6, {"loss": 0.1}), (7, {"loss": 0.2, "accuracy": 0.9})]
    with pytest.raises(TypeError, match="report\\(step, \\*\\*metrics\\).*report\\(value, step\\)"):
        trial.report(1, 2, loss=3)
    with pytest.raises(TypeError, match="step must be an int"):
        trial.report(0.5, 0.5)


def test_should_prune_is_optunas_method_and_optunas_trialpruned_prunes():
    import optuna

    def objective(trial):
        trial.set_user_attr("kind", "probe")
        for step in range(5):
            trial.report(0.1 * step, step)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return 1.0

    pruned = Trial(params={}, number=0, study="s", _reporter=lambda s, m: s >= 2)
    outcome = run_objective(objective, pruned)
    assert outcome.status == "pruned" and outcome.step == 2
    assert outcome.metrics["kind"] == "probe"
    ok = run_objective(objective, Trial(params={}, number=1, study="s",
                                        _reporter=lambda s, m: False))
    assert (ok.status, ok.value, ok.metrics["kind"]) == ("ok", 1.0, "probe")


def test_user_attrs_are_bounded():
    trial = Trial(params={}, number=0, study="s")
    trial.set_user_attr("note", "x" * 5000)
    assert len(trial.user_attrs["note"]) == 1000
    for i in range(99):
        trial.set_user_attr(f"a{i}", i)
    with pytest.raises(ValueError, match="USER_ATTRS"):
        trial.set_user_attr("one_more", 1)
    with pytest.raises(TypeError, match="must be a number or a string"):
        trial.set_user_attr("obj", object())


def test_a_hand_made_trial_replays_stored_params():
    trial = Trial(params={"classifier": "SVC", "svc_c": 3.0}, number=0, study="s")
    assert trial.suggest_categorical("classifier", ["SVC", "RF"]) == "SVC"
    assert trial.suggest_float("svc_c", 1e-10, 1e10, log=True) == 3.0
    assert trial.suggest_float("svc_c", 1e-10, 1e10, log=True) == 3.0   # asked again
    with pytest.raises(SuggestFailed, match="disagrees with this trial's earlier"):
        trial.suggest_float("svc_c", 1e-5, 1e10, log=True)
    with pytest.raises(SuggestFailed, match="rf_max_depth is not in trial.params"):
        trial.suggest_int("rf_max_depth", 2, 32)


def test_suggest_checks_its_arguments_as_optuna_does():
    trial = Trial(params={}, number=0, study="s")
    with pytest.raises(ValueError, match="low <= high"):
        trial.suggest_float("x", 2.0, 1.0)
    with pytest.raises(ValueError, match="step and log=True"):
        trial.suggest_float("x", 1.0, 2.0, step=0.1, log=True)
    with pytest.raises(ValueError, match="duplicate choice"):
        trial.suggest_categorical("x", ["a", "a"])


# -- the master's answers --------------------------------------------------------------

def test_the_master_answers_once_per_name_and_refuses_a_changed_distribution():
    settings = parse_settings({"strategy": "random", "max_trials": 5, "seed": 4}, "s")
    engine = SearchEngine(settings, MemoryStorage().open_study("s", "random", "accuracy",
                                                               "maximize", {}, 2), 4)
    suggestions = Suggestions(settings.space, engine.sampler)
    params: dict = {}
    report = {"trial": 0, "name": "lr", "distribution": float_distribution(1e-4, 1.0, log=True)}
    answer, row = suggestions.answer(report, params)
    assert 1e-4 <= answer["value"] <= 1.0 and row.value == answer["value"] == params["lr"]
    assert suggestions.answer(report, params) == ({"value": answer["value"]}, None)
    changed = {**report, "distribution": float_distribution(1e-3, 1.0, log=True)}
    error, row = suggestions.answer(changed, params)
    assert row is None and "suggest_float('lr', 0.001, 1.0, log=True) disagrees with this " \
        "trial's earlier trial.suggest_float('lr', 0.0001, 1.0, log=True)" in error["error"]
    assert "not running" in suggestions.answer(report, None)[0]["error"]
    bad = suggestions.answer({"trial": 0, "name": "x", "distribution": {"kind": "float",
                                                                       "low": 2, "high": 1}}, {})
    assert "low <= high" in bad[0]["error"]


# -- whole searches in one process -----------------------------------------------------

def optuna_style(trial) -> float:
    """tests/search/probe_optuna.py's objective, exactly as Optuna's users write them
    (imported here, not at the top: collecting this file imports no Optuna)."""
    from tests.search.probe_optuna import objective

    return objective(trial)


def search(store, settings: dict, study: str, objective=optuna_style, workers: int = 4):
    space = FakeSpace()
    threads = [threading.Thread(target=serve_tasks, daemon=True, args=(
        space, study, copy, InProcessRunner(objective))) for copy in range(workers)]
    for thread in threads:
        thread.start()
    parsed = parse_settings({"metrics": ["value"], "objective": "value",
                             "direction": "maximize", **settings}, "search")
    run_search(space, parsed, store, workers, study=study, out=io.StringIO(), poll=0.05)
    for thread in threads:
        thread.join(timeout=10)
        assert not thread.is_alive()
    return parsed


def test_a_declared_space_checks_each_suggest_and_names_both_on_a_mismatch():
    store = MemoryStorage()
    declared = {"classifier": {"choice": ["SVC", "RandomForest"]},
                "svc_c": {"loguniform": [1e-10, 1e10], "when": {"classifier": "SVC"}},
                "rf_max_depth": {"int": [2, 32], "when": {"classifier": "RandomForest"}}}
    search(store, {"strategy": "random", "max_trials": 8, "seed": 2, "space": declared}, "a")
    failed = store.trials("a", "failed")
    # rf_max_depth is declared without log=True: the call disagrees, so RF trials fail
    assert failed and all(t["params"]["classifier"] == "RandomForest" for t in failed)
    assert all("trial.suggest_int('rf_max_depth', 2, 32, log=True) disagrees with the "
               "declared space: rf_max_depth: {int: [2, 32]}" in t["error"] for t in failed)
    ok = [t for t in store.trials("a") if t["status"] != "failed"]
    assert ok and all(set(t["params"]) == {"classifier", "svc_c"} for t in ok)
    # resumable: trials without their inactive parameters are points of the space
    search(store, {"strategy": "random", "max_trials": 10, "seed": 2, "space": declared}, "a")
    assert len(store.trials("a")) == 10


def test_suggesting_an_inactive_declared_parameter_fails_clearly():
    def objective(trial):
        trial.suggest_categorical("classifier", ["SVC", "RF"])
        return trial.suggest_float("svc_c", 1e-2, 1e2, log=True)

    store = MemoryStorage()
    declared = {"classifier": {"values": ["SVC", "RF"]},
                "svc_c": {"logrange": [1e-2, 1e2], "num": 3, "when": {"classifier": "SVC"}}}
    search(store, {"strategy": "grid", "space": declared}, "g", objective, workers=2)
    assert len(store.trials("g")) == 3 + 1
    rf = next(t for t in store.trials("g") if t["params"]["classifier"] == "RF")
    assert rf["status"] == "failed"
    assert "svc_c is declared with when: {'classifier': ['SVC']}" in rf["error"]


@pytest.mark.parametrize("strategy", ["tpe", "random"])
def test_an_optuna_style_objective_runs_unchanged(strategy):
    store = MemoryStorage()
    search(store, {"strategy": strategy, "max_trials": 24, "seed": 5,
                   "pruner": {"median": {"min_trials": 3, "warmup_epochs": 1}}}, strategy)
    trials = store.trials(strategy)
    assert len(trials) == 24 and not [t for t in trials if t["status"] == "failed"]
    assert any(t["status"] == "pruned" for t in trials)
    for t in trials:
        extra = {"svc_c"} if t["params"]["classifier"] == "SVC" else {"rf_max_depth"}
        assert set(t["params"]) == {"classifier"} | extra
    best = max((t for t in trials if t["status"] == "ok"), key=lambda t: t["objective"])
    again = optuna_style(Trial(params=dict(best["params"]), number=best["number"], study="x"))
    assert again == best["objective"]


def test_a_resumed_define_by_run_tpe_rebuilds_its_sampler_from_the_distributions():
    from optuna.distributions import CategoricalDistribution

    store = MemoryStorage()
    settings = {"strategy": "tpe", "max_trials": 10, "seed": 3}
    search(store, settings, "r")
    parsed = search(store, {**settings, "max_trials": 14}, "r")
    assert len(store.trials("r")) == 14
    state = store.open_study("r", "tpe", "value", "maximize", {}, 2)
    assert all(set(t.distributions) == set(t.params) for t in state.finished)
    engine = SearchEngine(parsed, state, 3)
    told = engine.sampler.study.trials
    assert len(told) == 14
    for trial, stored in zip(told, sorted(state.finished, key=lambda t: t.number)):
        assert trial.params == stored.params
        assert set(trial.distributions) == set(stored.distributions)
    assert told[0].distributions["classifier"] == CategoricalDistribution(["SVC", "RandomForest"])


def test_distributions_follow_optuna():
    assert int_distribution(2, 32, log=True) == {"kind": "int", "low": 2, "high": 32,
                                                 "log": True, "step": 1}
    assert categorical_distribution([None, True, 1, "a"])["choices"] == [None, True, 1, "a"]
    with pytest.raises(ValueError, match="log=True needs step=1"):
        int_distribution(1, 8, step=2, log=True)


def test_grid_points_of_a_declared_grid_space_keep_their_kinds():
    space = parse_space({"r": {"range": [1, 5], "step": 2}}, PATH, GRID_KINDS, "grid")
    forms = space.declarations()["r"]["forms"]
    assert {"kind": "int", "low": 1, "high": 5, "log": False, "step": 2} in forms


def test_suggestions_wait_for_the_trials_next_report_to_be_committed():
    class Counting(MemoryStorage):
        alone = 0

        def record(self, study_id, epochs=(), results=(), starts=(), started=(),
                   checkpoints=(), suggested=()):
            if suggested and not (epochs or results or starts or started or checkpoints):
                Counting.alone += 1
            super().record(study_id, epochs, results, starts, started, checkpoints, suggested)

    def many(trial):
        values = [trial.suggest_float(f"x{i}", 0.0, 1.0) for i in range(20)]
        trial.report(sum(values), 0)
        return sum(values)

    store = Counting()
    search(store, {"strategy": "random", "max_trials": 4, "seed": 1}, "c", many, workers=2)
    assert Counting.alone == 0
    trials = store.trials("c")
    assert len(trials) == 4 and all(len(t["params"]) == 20 for t in trials)


@pytest.mark.parametrize("strategy", ["random", "tpe", "gp", "cmaes", "qmc", "nsga2"])
def test_every_suggesting_strategy_answers_a_discovered_space_and_is_rebuilt(strategy):
    settings = parse_settings({"strategy": strategy, "max_trials": 10, "seed": 2}, "s")
    sampler = settings.sampler(settings.space, ["maximize"], 2, {}, "async")
    sampler.restore([])
    told = []
    for number in range(8):
        params = sampler.propose(number)
        distributions = {"classifier": categorical_distribution(["SVC", "RF"])}
        params["classifier"] = sampler.suggest(number, "classifier", distributions["classifier"])
        name, distribution = ("svc_c", float_distribution(1e-3, 1e3, log=True)) \
            if params["classifier"] == "SVC" else ("depth", int_distribution(2, 32, log=True))
        params[name] = sampler.suggest(number, name, distribution)
        distributions[name] = distribution
        assert params["classifier"] in ("SVC", "RF")
        assert (1e-3 <= params[name] <= 1e3) if name == "svc_c" else (2 <= params[name] <= 32)
        sampler.tell(number, params, (float(number),), "ok")
        told.append(Observation(number, params, "ok", (float(number),), distributions))
    rebuilt = settings.sampler(settings.space, ["maximize"], 2, {}, "async")
    rebuilt.restore(told)
    rebuilt.propose(8)
    assert rebuilt.suggest(8, "classifier", categorical_distribution(["SVC", "RF"])) in \
        ("SVC", "RF")
    if strategy != "random":
        assert [t.params for t in rebuilt.study.trials[:8]] == [t.params for t in told]


def test_a_trial_left_running_is_answered_with_its_stored_values_again():
    from diel.results import StoredTrial

    settings = parse_settings({"strategy": "tpe", "max_trials": 5, "seed": 4}, "s")
    stored = {"kind": "float", "low": 0.001, "high": 1000.0, "log": True}   # as the row has it
    left = StoredTrial(3, {"svc_c": 2.5}, "k", "running", distributions={"svc_c": stored})
    engine = SearchEngine(settings, MemoryStorage().open_study("s", "tpe", "value",
                                                               "maximize", {}, 2), 4)
    suggestions = Suggestions(settings.space, engine.sampler, [left])
    again = {"trial": 3, "name": "svc_c", "distribution": float_distribution(1e-3, 1e3, log=True)}
    assert suggestions.answer(again, {"svc_c": 2.5}) == ({"value": 2.5}, None)
    other = {**again, "distribution": float_distribution(1e-3, 1e3)}
    assert "disagrees with this trial's earlier" in suggestions.answer(other, {})[0]["error"]
