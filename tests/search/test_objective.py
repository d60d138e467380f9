"""Objective expressions and thresholds: safe parsing and evaluation."""

from __future__ import annotations

import math

import pytest

from diel.errors import ConfigError
from diel.search.objective import BASE_METRICS, Expression, Objective, Threshold

NAMES = BASE_METRICS


def test_expression_evaluates_metrics():
    e = Expression("accuracy - 0.001 * time", "p", NAMES)
    assert e.names == {"accuracy", "time"}
    assert e.evaluate({"accuracy": 0.9, "time": 100}) == pytest.approx(0.8)
    assert Expression("-(loss ** 2) / 2 + max(accuracy, 0.5) + log(exp(1))", "p",
                      NAMES).evaluate({"loss": 2, "accuracy": 0.1}) == pytest.approx(-0.5)


def test_missing_metric_gives_none_and_bad_arithmetic_nan():
    e = Expression("accuracy / loss", "p", NAMES)
    assert e.evaluate({"accuracy": 1.0}) is None
    assert e.evaluate({"accuracy": 1.0, "loss": "x"}) is None
    assert math.isnan(e.evaluate({"accuracy": 1.0, "loss": 0}))
    assert math.isnan(Expression("10 ** 10 ** 10", "p", NAMES).evaluate({}))


@pytest.mark.parametrize("text, words", [
    ("accuracy +", "cannot parse"),
    ("precision", "unknown name 'precision'"),
    ("__import__('os')", "unknown function"),
    ("accuracy.real", "Attribute is not allowed"),
    ("accuracy if loss else time", "IfExp is not allowed"),
    ("'a' + accuracy", "only numbers"),
    ("accuracy[0]", "Subscript is not allowed"),
    ("lambda: 1", "Lambda is not allowed"),
    ("accuracy % 2", "BinOp is not allowed"),
    ("max(accuracy, key=1)", "unknown function"),
    (["accuracy"], "expected an expression"),
])
def test_bad_objectives_are_config_errors_with_the_path(text, words):
    with pytest.raises(ConfigError) as info:
        Objective(text, "maximize", "modules.search.settings", NAMES)
    assert info.value.path == "modules.search.settings.objective"
    assert words in info.value.message


def test_direction():
    with pytest.raises(ConfigError) as info:
        Objective("loss", "down", "s", NAMES)
    assert info.value.path == "s.direction"
    low = Objective("loss", "minimize", "s", NAMES)
    assert low.better(0.1, 0.2) and not low.better(0.3, 0.2) and low.better(5, None)
    assert Objective("accuracy", "maximize", "s", NAMES).better(0.3, 0.2)


def test_thresholds():
    t = Threshold("accuracy >= 0.97", "s.stop_when", NAMES)
    assert t.met({"accuracy": 0.97}) and not t.met({"accuracy": 0.96}) and not t.met({})
    assert Threshold("loss * 2 < 0.1", "p", NAMES).met({"loss": 0.01})
    assert not Threshold("loss < 0.1", "p", NAMES).met({"loss": float("nan")})
    for bad in ("accuracy", "accuracy == 1", "0 < accuracy < 1", "speed > 1", 3):
        with pytest.raises(ConfigError) as info:
            Threshold(bad, "s.stop_when", NAMES)
        assert info.value.path == "s.stop_when"
