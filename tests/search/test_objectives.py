"""Several objectives in the search settings: ``objectives: {EXPR: DIRECTION, ...}``
parsed beside the single ``objective``/``direction`` form, and every mistake a
ConfigError at its key path."""

from __future__ import annotations

import math

import pytest

from diel.errors import ConfigError
from diel.search.objective import BASE_METRICS, parse_objectives

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
