"""The sampler interface with a fake sampler found through the entry-point group
``diel.samplers``, and the strategies' settings as ``diel validate`` checks them."""

from __future__ import annotations

import sys

import pytest

from diel.errors import ConfigError
from diel.results import MemoryStorage, ResultRecord, StudyState, TrialStart
from diel.search import parse_settings, validate_settings
from diel.search.engine import SearchEngine
from diel.search.samplers import GROUP, Observation, Sampler
from diel.search.samplers.optuna_based import CmaEsSampler, TPESampler
from diel.search.space import param_key
from tests.helpers.plugins import FakeEntryPoint, beside_installed
from tests.helpers.search import Harness

P = "modules.search.settings"
SPACE = {"x": {"range": [0, 9], "step": 1}}


class FakeSampler(Sampler):
    """Proposes x = 0, 1, 2, ... up to ``last`` (an option), recording every call."""

    calls: list[tuple] = []

    @classmethod
    def check(cls, name, space, directions, options, path):
        for key, value in options.items():
            if key != "last" or not isinstance(value, int):
                raise ConfigError(f"{path}.{key}", "the fake takes last: an integer")

    @classmethod
    def size(cls, space):
        return 4

    def restore(self, trials):
        self.calls.append(("restore", [(t.number, t.status, t.values) for t in trials]))
        self.next_x = 1 + max((t.params["x"] for t in trials), default=-1)

    def propose(self, number):
        self.calls.append(("propose", number))
        if self.next_x > self.options.get("last", 9):
            return None
        self.next_x += 1
        return {"x": self.next_x - 1}

    def tell(self, number, params, values, status):
        self.calls.append(("tell", number, params, values, status))


def score(params: dict, report) -> dict:
    return {"accuracy": params["x"] / 10, "loss": 0.0}


@pytest.fixture
def plugins(monkeypatch):
    """Register entry points of diel.samplers beside the installed ones."""
    FakeSampler.calls = []
    return beside_installed(monkeypatch, GROUP)


def test_a_sampler_registered_by_entry_point_drives_the_search(tmp_path, plugins):
    plugins.append(FakeEntryPoint("fake", "fakepkg.samplers:FakeSampler", FakeSampler))
    h = Harness(tmp_path, workers=2)
    summary = h.run({"strategy": {"fake": {"last": 2}}, "space": SPACE, "mode": "batch"},
                    trial=score)
    assert summary.stop_reason == "fake exhausted"
    assert summary.stats.total == 4            # the sampler's size
    assert sorted(t["params"]["x"] for t in h.trials()) == [0, 1, 2]
    kinds = [call[0] for call in FakeSampler.calls]
    assert kinds[0] == "restore" and FakeSampler.calls[0] == ("restore", [])
    # batch mode: a group of two proposed, both results told in number order, then the next
    assert kinds == ["restore", "propose", "propose", "tell", "tell", "propose", "propose"]
    tells = [call for call in FakeSampler.calls if call[0] == "tell"]
    assert [call[1] for call in tells] == [0, 1]
    assert tells[0][2] == {"x": 0} and tells[0][4] == "ok"
    assert tells[1][3] == (0.1,)   # x=1: the objective, accuracy


def test_a_resumed_study_restores_its_sampler_with_every_stored_trial(tmp_path, plugins):
    plugins.append(FakeEntryPoint("fake", "fakepkg.samplers:FakeSampler", FakeSampler))
    settings = parse_settings({"strategy": "fake", "space": SPACE}, P)
    store = MemoryStorage()
    state = store.open_study("s", "fake", "accuracy", "maximize", {})
    store.record(state.study_id, starts=[TrialStart(i, {"x": i}, param_key({"x": i}))
                                        for i in range(3)])
    store.record(state.study_id, [], [ResultRecord(0, "ok", objective=0.5, accuracy=0.5),
                                      ResultRecord(2, "failed", error="boom")])
    state = store.open_study("s", "fake", "accuracy", "maximize", {})
    engine = SearchEngine(settings, state, seed=1)
    assert FakeSampler.calls == [("restore", [(0, "ok", (0.5,)), (1, "running", None),
                                              (2, "failed", None)])]
    first, second = engine.next_trial(), engine.next_trial()
    assert (first.number, first.params) == (1, {"x": 1})    # left running: dispatched again
    assert (second.number, second.params) == (3, {"x": 3})  # then new numbers
    engine.on_result({"trial": 1, "status": "ok", "accuracy": 0.25})
    engine.next_trial()
    assert FakeSampler.calls[-2:] == [("tell", 1, {"x": 1}, (0.25,), "ok"), ("propose", 4)]


@pytest.mark.parametrize("target, words", [
    (ValueError("no such thing"), "failed to load: ValueError: no such thing"),
    (dict, "is not a subclass of diel.search.samplers.Sampler"),
])
def test_a_broken_plugin_is_a_config_error(plugins, target, words):
    plugins.append(FakeEntryPoint("broken", "pkg:Broken", target))
    with pytest.raises(ConfigError) as info:
        parse_settings({"strategy": "broken", "space": SPACE}, P)
    assert info.value.path == f"{P}.strategy" and words in info.value.message


def test_plugin_options_are_checked_by_the_plugin(plugins):
    plugins.append(FakeEntryPoint("fake", "fakepkg.samplers:FakeSampler", FakeSampler))
    with pytest.raises(ConfigError) as info:
        validate_settings({"strategy": {"fake": {"first": 1}}, "space": SPACE}, P)
    assert info.value.path == f"{P}.strategy.fake.first"


def test_the_default_check_refuses_options():
    class Plain(Sampler):
        def propose(self, number):
            return {}
    with pytest.raises(ConfigError, match="strategy plain takes no options"):
        Plain.check("plain", None, ["maximize"], {"a": 1}, "s.strategy.plain")


def test_unknown_strategy_suggests_the_closest():
    with pytest.raises(ConfigError) as info:
        parse_settings({"strategy": "tep", "space": SPACE}, P)
    assert info.value.path == f"{P}.strategy"
    assert "unknown strategy 'tep'; did you mean tpe?" in info.value.message
    assert "cmaes, gp, grid, nsga2, pbt, qmc, random, tpe" in info.value.message


# -- the Optuna-based strategies' settings --------------------------------------------

RANDOM_SPACE = {"lr": {"loguniform": [1e-4, 1e-1]}, "layers": {"int": [1, 4]},
                "act": {"choice": ["relu", "tanh"]}, "width": {"range": [16, 64], "step": 16}}


@pytest.mark.parametrize("strategy", ["tpe", "gp", "qmc", "nsga2",
                                      {"tpe": {"n_startup_trials": 10, "multivariate": True}},
                                      {"gp": {"n_startup_trials": 5}},
                                      {"qmc": {"qmc_type": "halton", "scramble": True}},
                                      {"nsga2": {"population_size": 8, "crossover_prob": 0.8}},
                                      {"cmaes": {"sigma0": 0.3, "popsize": 6}}])
def test_model_based_strategies_validate(strategy):
    space = RANDOM_SPACE if "cmaes" not in strategy else {"lr": {"loguniform": [1e-4, 1e-1]}}
    settings = parse_settings({"strategy": strategy, "space": space, "max_trials": 20}, P)
    assert settings.strategy == (strategy if isinstance(strategy, str) else next(iter(strategy)))


@pytest.mark.parametrize("strategy, path, words", [
    ({"tpe": {"n_startup_trial": 3}}, "strategy.tpe.n_startup_trial",
     "unknown option of strategy tpe; did you mean n_startup_trials? its options: "),
    ({"tpe": {"n_startup_trials": "ten"}}, "strategy.tpe.n_startup_trials",
     "expected int; got 'ten'"),
    ({"tpe": {"constant_liar": 1}}, "strategy.tpe.constant_liar", "expected bool; got 1"),
    ({"gp": {"n_startup_trials": True}}, "strategy.gp.n_startup_trials", "expected int"),
    ({"tpe": {"seed": 3}}, "strategy.tpe.seed", "a setting of the search itself"),
    ({"tpe": {"gamma": 0.1}}, "strategy.tpe.gamma", "unknown option"),   # a callable in Optuna
    ({"qmc": {"qmc_type": "lattice"}}, "strategy.qmc", "strategy qmc: "),   # Optuna's own check
    ({"tpe": [1]}, "strategy", "a mapping of one name to its options"),
    ({"tpe": {}, "gp": {}}, "strategy", "a mapping of one name to its options"),
])
def test_strategy_options_are_checked(strategy, path, words):
    with pytest.raises(ConfigError) as info:
        validate_settings({"strategy": strategy, "space": RANDOM_SPACE, "max_trials": 5}, P)
    assert info.value.path == f"{P}.{path}"
    assert words in info.value.message


def test_option_list_comes_from_optunas_signature():
    options = TPESampler.accepted_options()
    assert {"n_startup_trials", "n_ei_candidates", "multivariate", "constant_liar"} <= set(options)
    assert not {"seed", "gamma", "weights", "constraints_func"} & set(options)
    assert options["multivariate"] == (bool, type(None))


def test_cmaes_refuses_categories_and_several_objectives():
    with pytest.raises(ConfigError) as info:
        parse_settings({"strategy": "cmaes", "space": RANDOM_SPACE, "max_trials": 5}, P)
    assert info.value.path == f"{P}.space.act.choice"
    assert info.value.message.startswith("strategy cmaes cannot search a choice parameter")
    with pytest.raises(ConfigError, match="strategy cmaes optimizes one objective"):
        CmaEsSampler.check("cmaes", None, ["maximize", "minimize"], {}, f"{P}.strategy")


def test_a_model_based_search_needs_an_end():
    with pytest.raises(ConfigError, match="a tpe search needs max_trials or time_budget") as info:
        parse_settings({"strategy": "tpe", "space": RANDOM_SPACE}, P)
    assert info.value.path == P


@pytest.mark.parametrize("strategy, missing, words", [
    ("tpe", "optuna", "strategy tpe needs Optuna: pip install 'diel[search]'"),
    ("cmaes", "cmaes", "strategy cmaes needs the cmaes package: pip install 'diel[search]'"),
    ("gp", "torch", "strategy gp needs PyTorch: pip install torch==2.13.0"),
])
def test_a_missing_library_names_what_to_install(monkeypatch, strategy, missing, words):
    monkeypatch.setitem(sys.modules, missing, None)   # import raises ImportError
    with pytest.raises(ConfigError) as info:
        validate_settings({"strategy": strategy, "space": {"x": {"uniform": [0, 1]}},
                           "max_trials": 5}, P)
    assert info.value.path == f"{P}.strategy" and words in info.value.message


# -- the Optuna wrapper: the space both ways, restore --------------------------------

def test_proposals_are_values_of_the_space():
    settings = parse_settings({"strategy": {"tpe": {"n_startup_trials": 2}},
                               "space": {**RANDOM_SPACE, "drop": {"range": [0.1, 0.5],
                                                                  "step": 0.1}},
                               "max_trials": 5}, P)
    sampler = TPESampler(settings.space, ["maximize"], 3, {"n_startup_trials": 2}, "async")
    sampler.restore([])
    for number in range(12):
        params = sampler.propose(number)
        assert 1e-4 <= params["lr"] <= 1e-1 and params["layers"] in (1, 2, 3, 4)
        assert isinstance(params["layers"], int) and params["act"] in ("relu", "tanh")
        assert params["width"] in (16, 32, 48, 64)
        assert params["drop"] in (0.1, 0.2, 0.3, 0.4, 0.5)   # the points exactly
        sampler.tell(number, params, (params["layers"] * 1.0,), "ok")


def test_restore_gives_optuna_every_stored_trial(caplog):
    space = parse_settings({"space": {"x": {"uniform": [0, 1]}, "k": {"values": ["a", "b"]}},
                            "strategy": "tpe", "max_trials": 9}, P).space
    trials = [Observation(0, {"x": 0.5, "k": "a"}, "ok", (0.5,)),
              Observation(1, {"x": 0.1, "k": "b"}, "failed"),
              Observation(2, {"x": 0.2, "k": "a"}, "pruned", (0.1,)),
              Observation(3, {"x": 0.3, "k": "b"}, "running")]
    sampler = TPESampler(space, ["maximize"], 3, {}, "async")
    with caplog.at_level("INFO", logger="diel.search"):
        sampler.restore(trials)
    assert "Optuna study rebuilt from the database with 3 finished and 1 running" in caplog.text
    stored = sampler.study.get_trials()
    assert [t.state.name for t in stored] == ["COMPLETE", "FAIL", "PRUNED", "RUNNING"]
    assert [t.params for t in stored] == [{"x": 0.5, "k": 0}, {"x": 0.1, "k": 1},
                                          {"x": 0.2, "k": 0}, {"x": 0.3, "k": 1}]
    assert stored[0].value == 0.5 and stored[2].value == 0.1
    sampler.tell(3, {"x": 0.3, "k": "b"}, (0.9,), "ok")   # the running one finishes
    assert sampler.study.best_trial.params == {"x": 0.3, "k": 1}


def test_a_restored_qmc_sequence_goes_on_where_it_stopped():
    """QMC keeps its position in Optuna's storage: a replayed restore must continue the
    sequence rather than start it again."""
    from diel.search.samplers.optuna_based import QMCSampler
    space = parse_settings({"space": {"x": {"uniform": [0, 1]}, "y": {"uniform": [0, 1]}},
                            "strategy": "qmc", "max_trials": 9}, P).space
    whole = QMCSampler(space, ["maximize"], 3, {}, "batch")
    whole.restore([])
    straight = [whole.propose(n) for n in range(6)]
    first = QMCSampler(space, ["maximize"], 3, {}, "batch")
    first.restore([])
    done = [Observation(n, first.propose(n), "ok", (0.0,)) for n in range(4)]
    resumed = QMCSampler(space, ["maximize"], 3, {}, "batch")
    resumed.restore(done)
    assert [resumed.propose(n) for n in (4, 5)] == straight[4:]


def test_engine_without_stored_trials_restores_an_empty_study():
    seen = []

    class Recorder(Sampler):
        def restore(self, trials):
            seen.append(list(trials))

        def propose(self, number):
            return {"x": number}
    settings = parse_settings({"space": SPACE}, P)
    engine = SearchEngine(settings, StudyState(1, [], [], {}), seed=1, sampler=Recorder(
        settings.space, ["maximize"], 1, {}, "async"))
    assert seen == [[]] and engine.next_trial().params == {"x": 0}


# -- reproducibility: a seeded batch search proposes the same trials on every run ------

def bowl(params: dict, report) -> dict:
    """A smooth objective with its best at x=0.3, y=2, lr=1e-3; slower for larger x, so
    results come back in another order than the trials went out."""
    import math
    import time
    time.sleep(0.02 * params["x"])
    value = 1 - (params["x"] - 0.3) ** 2 - (params["y"] - 2) ** 2 / 25 \
        - (math.log10(params["lr"]) + 3) ** 2 / 9
    return {"accuracy": value, "loss": 1 - value}


BOWL = {"x": {"uniform": [0, 1]}, "y": {"int": [0, 5]}, "lr": {"logrange": [1e-4, 1e-1], "num": 4}}


@pytest.mark.parametrize("strategy, trials", [
    ({"tpe": {"n_startup_trials": 3}}, 12),
    ({"gp": {"n_startup_trials": 3}}, 6),
    ({"cmaes": {"popsize": 3}}, 12),
    ("qmc", 9),
    ({"nsga2": {"population_size": 3}}, 12),
])
def test_a_seeded_batch_search_proposes_the_same_trials_every_run(tmp_path, strategy, trials):
    runs = []
    for run in ("a", "b"):
        (tmp_path / run).mkdir()
        h = Harness(tmp_path / run, workers=3)
        h.run({"strategy": strategy, "space": BOWL, "mode": "batch", "seed": 7,
               "max_trials": trials}, trial=bowl)
        runs.append([(t["number"], t["params"]) for t in h.trials(sort="number")])
    assert runs[0] == runs[1]
    assert [number for number, _ in runs[0]] == list(range(trials))
    assert len({param_key(p) for _, p in runs[0]}) > trials // 2   # not one point again
