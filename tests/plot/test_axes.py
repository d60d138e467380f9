"""How each kind of parameter is drawn, from the stored space and the trials' values."""

from __future__ import annotations

import pytest

from diel.plot._kinds import KIND_HELP
from diel.plot._study import Axis, _axes
from diel.plot.data import KINDS


def trials(**columns):
    """The parameter sets of trials holding ``columns``' values, one a trial."""
    names = list(columns)
    return [dict(zip(names, values)) for values in zip(*columns.values())]


@pytest.mark.parametrize("spec, seen, scale, choices", [
    ({"logrange": [1e-4, 1e-1], "num": 4}, [1e-4, 1e-2], "log", ()),
    ({"loguniform": [0.01, 0.5]}, [0.02, 0.3], "log", ()),
    ({"int": [1, 3]}, [1, 3], "int", ()),
    ({"range": [32, 128], "step": 32}, [32, 96], "int", ()),
    ({"range": [0.1, 0.5], "step": 0.1}, [0.1, 0.3], "linear", ()),
    ({"uniform": [0, 1]}, [0.2, 0.7], "linear", ()),
    ({"values": [64, 256]}, [64, 256], "int", ()),
    ({"values": [0.03, 0.1, 0.3]}, [0.03, 0.3], "linear", ()),
    ({"choice": [0.0, 0.9]}, [0.0, 0.9], "linear", ()),
    ({"choice": ["relu", "tanh"]}, ["tanh"], "categorical", ("relu", "tanh")),  # all the space's
    ({"values": [True, False]}, [True], "categorical", (True, False)),  # booleans are not numbers
    ({"values": [32, "auto"]}, [32, "auto"], "categorical", (32, "auto")),
    (None, [1, 2, 5], "int", ()),                               # not in the stored space
    (None, [0.5, 2], "linear", ()),
    (None, ["a", "b"], "categorical", ("a", "b")),
])
def test_the_scale_of_each_kind(spec, seen, scale, choices):
    (axis,) = _axes({"p": spec} if spec else {}, trials(p=seen))
    assert axis == Axis("p", scale, choices)


def test_categories_keep_the_space_order_then_new_values():
    space = {"act": {"choice": ["tanh", "relu"]}}
    (axis,) = _axes(space, trials(act=["relu", "gelu", "tanh"]))
    assert axis.choices == ("tanh", "relu", "gelu")
    assert [axis.position(v) for v in ["relu", "gelu", "swish"]] == [1.0, 2.0, None]
    assert Axis("b", "categorical", (True, None)).labels() == ["true", "null"]


def test_parameters_the_space_lacks_follow_its_own():
    space = {"lr": {"loguniform": [1e-3, 1e-1]}, "width": {"values": [1, 2]}}
    axes = _axes(space, trials(lr=[1e-2], width=[1], depth=[3], act=["relu"]))
    assert [a.name for a in axes] == ["lr", "width", "act", "depth"]


def test_positions_on_numeric_axes():
    assert Axis("lr", "log").position(0.01) == 0.01
    assert Axis("lr", "log").position(0) is None
    assert Axis("n", "int").position("many") is None


def test_every_kind_has_its_help_and_its_data():
    assert list(KINDS) == list(KIND_HELP)
