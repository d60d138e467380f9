"""diel.plugins: the one way modules, samplers and schedulers are found by name
in their entry-point groups, and what each problem with a plug-in reads like."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

import pytest

from diel.errors import ConfigError
from diel.executive.config import ModuleSpec
from diel.executive.modules import resolve_function
from diel.plugins import BUILTINS, load_plugin, plugin_names
from diel.limits import LOG_TEXT_CHARS
from diel.search.samplers.random import RandomSampler
from diel.search.schedulers.median import MedianPruner
from tests.helpers.plugins import FakeEntryPoint, only

GROUP = "diel.test_plugins"


@pytest.fixture
def installed(monkeypatch):
    """The entry points every group holds in a test: a list to append to."""
    return only(monkeypatch)


def unknown(names: list[str]) -> str:
    return f"no such thing; installed: {', '.join(names)}"


def test_a_plugin_is_found_by_its_group_and_name(installed):
    installed += [FakeEntryPoint("b", "pkg:B", dict, GROUP), FakeEntryPoint("a", "pkg:A", list, GROUP),
                  FakeEntryPoint("c", "pkg:C", set, "other")]
    assert plugin_names(GROUP) == ["a", "b"]
    assert load_plugin(GROUP, "a", "p", "thing", unknown) is list
    assert load_plugin(GROUP, "b", "p", "thing", unknown, base=dict, base_name="dict") is dict
    error = pytest.raises(ConfigError, load_plugin, GROUP, "c", "p", "thing", unknown).value
    assert (error.path, error.message) == ("p", "no such thing; installed: a, b")


def test_one_name_with_two_targets_is_refused_but_one_target_seen_twice_is_not(installed):
    installed += [FakeEntryPoint("a", "pkg:A", list, GROUP), FakeEntryPoint("a", "pkg:A", list, GROUP)]
    assert load_plugin(GROUP, "a", "p", "thing", unknown) is list   # an egg-info and a dist-info
    installed.append(FakeEntryPoint("a", "other:A", tuple, GROUP))
    with pytest.raises(ConfigError, match="thing 'a' is registered more than once in "
                                          f"{GROUP}: other:A, pkg:A; uninstall one"):
        load_plugin(GROUP, "a", "p", "thing", unknown)


def test_a_broken_plugin_is_one_clipped_line_and_a_wrong_one_names_the_base(installed):
    installed += [FakeEntryPoint("loud", "pkg:Loud", ValueError("x" * 50_000), GROUP),
                  FakeEntryPoint("plain", "pkg:plain", len, GROUP)]
    error = pytest.raises(ConfigError, load_plugin, GROUP, "loud", "p", "thing", unknown).value
    assert error.message.startswith("thing loud (pkg:Loud) failed to load: ValueError: xxx")
    assert len(error.message) < LOG_TEXT_CHARS + 100
    error = pytest.raises(ConfigError, load_plugin, GROUP, "plain", "p", "thing", unknown,
                          base=dict, base_name="diel.Thing").value
    assert error.message == "thing plain (pkg:plain) is not a subclass of diel.Thing"


def test_a_builtin_module_is_a_plugin_of_diel_modules(installed):
    installed.append(FakeEntryPoint("broken", "pkg:main", ImportError("no numpy"), "diel.modules"))
    error = pytest.raises(ConfigError, resolve_function,
                          ModuleSpec("m", function="broken")).value
    assert (error.path, error.message) == (
        "modules.m.function", "builtin broken (pkg:main) failed to load: ImportError: no numpy")
    error = pytest.raises(ConfigError, resolve_function, ModuleSpec("m", function="brokn")).value
    assert error.message == ("'brokn' is not a builtin module (installed builtins: broken); "
                             "name a function as 'package.module:function'")


def test_diel_s_own_plugins_are_pyproject_s_and_load_without_reading_entry_points(monkeypatch):
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    assert BUILTINS == tomllib.loads(pyproject.read_text())["project"]["entry-points"]

    def read(group):
        raise AssertionError(f"the entry points of {group} were read")
    monkeypatch.setattr(importlib.metadata, "entry_points", read)
    assert load_plugin("diel.samplers", "random", "p", "strategy", unknown) is RandomSampler
    assert load_plugin("diel.schedulers", "median", "p", "scheduler", unknown) is MedianPruner
    assert resolve_function(ModuleSpec("m", function="tuplespace")).__module__ == \
        "tuplespace.module"
    error = pytest.raises(ConfigError, load_plugin, "diel.samplers", "random", "p", "strategy",
                          unknown, base=dict, base_name="diel.Thing").value
    assert error.message == ("strategy random (diel.search.samplers.random:RandomSampler) "
                             "is not a subclass of diel.Thing")
