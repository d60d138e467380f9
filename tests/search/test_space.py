"""Search spaces: grid enumeration, random sampling, malformed specs."""

from __future__ import annotations

import pytest

from diel.errors import ConfigError
from diel.search.space import GRID_KINDS, param_key, parse_space

PATH = "modules.search.settings.space"


def points(spec: dict) -> tuple:
    return parse_space({"p": spec}, PATH, GRID_KINDS, "grid").params[0].points


def test_values_range_and_logrange_points():
    assert points({"values": ["relu", "tanh"]}) == ("relu", "tanh")
    assert points({"range": [1, 5], "step": 2}) == (1, 3, 5)
    assert points({"range": [1, 6], "step": 2}) == (1, 3, 5)
    assert points({"range": [0.1, 0.5], "step": 0.1}) == (0.1, 0.2, 0.3, 0.4, 0.5)
    assert points({"range": [0, 1], "step": 0.25}) == (0.0, 0.25, 0.5, 0.75, 1.0)
    assert points({"range": [0.0, 0.3], "step": 0.1}) == (0.0, 0.1, 0.2, 0.3)
    assert points({"logrange": [1e-4, 1e-1], "num": 4}) == (1e-4, 1e-3, 1e-2, 1e-1)
    assert points({"logrange": [1e-3, 1e-1], "per_decade": 2}) == \
        (1e-3, 0.00316227766017, 1e-2, 0.0316227766017, 1e-1)
    assert points({"logrange": [1, 1000], "num": 4}) == (1.0, 10.0, 100.0, 1000.0)


def test_grid_order_is_deterministic_last_parameter_fastest():
    space = parse_space({"layers": {"values": [1, 2]}, "activation": {"values": ["relu", "tanh"]},
                         "lr": {"logrange": [0.01, 0.1], "num": 2}}, PATH, GRID_KINDS, "grid")
    grid = space.grid()
    assert space.grid_size() == len(grid) == 8
    assert grid[:3] == [{"layers": 1, "activation": "relu", "lr": 0.01},
                        {"layers": 1, "activation": "relu", "lr": 0.1},
                        {"layers": 1, "activation": "tanh", "lr": 0.01}]
    assert grid[-1] == {"layers": 2, "activation": "tanh", "lr": 0.1}
    assert len({param_key(p) for p in grid}) == 8


def test_param_key_is_canonical():
    assert param_key({"b": 1, "a": "x"}) == param_key({"a": "x", "b": 1}) == '{"a":"x","b":1}'


RANDOM = {"lr": {"loguniform": [1e-4, 1e-1]}, "momentum": {"uniform": [0.5, 0.99]},
          "layers": {"int": [1, 4]}, "activation": {"choice": ["relu", "tanh", "sigmoid"]},
          "width": {"values": [32, 64]}, "drop": {"range": [0, 0.5], "step": 0.25}}


def test_random_samples_are_reproducible_and_within_bounds():
    space = parse_space(RANDOM, PATH)
    draws = [space.sample(7, n) for n in range(300)]
    assert draws == [space.sample(7, n) for n in range(300)]
    assert draws != [space.sample(8, n) for n in range(300)]
    assert all(1e-4 <= d["lr"] <= 1e-1 and 0.5 <= d["momentum"] <= 0.99 for d in draws)
    assert {d["layers"] for d in draws} == {1, 2, 3, 4}
    assert all(isinstance(d["layers"], int) for d in draws)
    assert {d["activation"] for d in draws} == {"relu", "tanh", "sigmoid"}
    assert {d["width"] for d in draws} == {32, 64} and {d["drop"] for d in draws} == {0, 0.25, 0.5}
    small = sum(d["lr"] < 1e-3 for d in draws)  # log-uniform: a third below 1e-3
    assert 60 < small < 140


@pytest.mark.parametrize("space, path, words", [
    (None, PATH, "mapping of parameter names"),
    ({"lr": [0.1, 0.2]}, f"{PATH}.lr", "expected a mapping"),
    ({"lr": {"values": []}}, f"{PATH}.lr.values", "non-empty list"),
    ({"lr": {"values": [1, 1]}}, f"{PATH}.lr.values[1]", "duplicate"),
    ({"lr": {"values": [[1]]}}, f"{PATH}.lr.values[0]", "number, string"),
    ({"lr": {"range": [0, 1]}}, f"{PATH}.lr.step", "step"),
    ({"lr": {"range": [0, 1], "step": -1}}, f"{PATH}.lr.step", "> 0"),
    ({"lr": {"range": [1, 0], "step": 0.1}}, f"{PATH}.lr.range", "low < high"),
    ({"lr": {"range": [0, "a"], "step": 1}}, f"{PATH}.lr.range", "[low, high]"),
    ({"lr": {"range": [0, 1], "step": 1e-9}}, f"{PATH}.lr.range", "at most"),
    ({"lr": {"logrange": [0, 1], "num": 3}}, f"{PATH}.lr.logrange", "low > 0"),
    ({"lr": {"logrange": [1e-3, 1], "num": 1}}, f"{PATH}.lr.num", ">= 2"),
    ({"lr": {"logrange": [1e-3, 1]}}, f"{PATH}.lr", "num"),
    ({"lr": {"logrange": [1e-3, 1], "num": 2, "per_decade": 2}}, f"{PATH}.lr", "exactly one"),
    ({"lr": {"values": [1], "range": [0, 1]}}, f"{PATH}.lr", "exactly one"),
    ({"lr": {"values": [1], "stepp": 1}}, f"{PATH}.lr.stepp", "unknown key"),
    ({"lr": {"uniform": [0, 1]}}, f"{PATH}.lr.uniform",
     "strategy grid cannot search a uniform parameter; it takes values, range, logrange"),
    ({"bad-name": {"values": [1]}}, f"{PATH}.bad-name", "identifiers"),
])
def test_malformed_grid_spaces_name_the_path(space, path, words):
    with pytest.raises(ConfigError) as info:
        parse_space(space, PATH, GRID_KINDS, "grid")
    assert info.value.path == path
    assert words in info.value.message


@pytest.mark.parametrize("spec, path", [
    ({"uniform": [1, 1]}, f"{PATH}.p.uniform"),
    ({"loguniform": [-1, 1]}, f"{PATH}.p.loguniform"),
    ({"int": [1.5, 3]}, f"{PATH}.p.int"),
    ({"choice": "relu"}, f"{PATH}.p.choice"),
    ({"uniform": [0, float("inf")]}, f"{PATH}.p.uniform"),
])
def test_malformed_random_spaces_name_the_path(spec, path):
    with pytest.raises(ConfigError) as info:
        parse_space({"p": spec}, PATH)
    assert info.value.path == path
