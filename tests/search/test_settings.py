"""validate_settings: every wrong setting is a ConfigError with its key path."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

from diel.cli import load_checked
from diel.executive.config import ConfigWarning
from diel.errors import ConfigError
from diel.search import parse_settings, validate_settings
from diel.plugins import BUILTINS
from diel.search.settings import UNCHECKED_BUILTINS, CheckpointSettings
from tests.helpers.search import workflow

P = "modules.search.settings"
SPACE = {"lr": {"values": [0.1, 0.01]}}


def test_defaults():
    s = parse_settings({"space": SPACE}, P)
    assert (s.strategy, s.mode, s.workers, s.objective.text, s.objective.direction) == \
        ("grid", "async", "trainer", "accuracy", "maximize")
    assert s.pruner is None and s.report_top == 5 and s.max_trials is None
    validate_settings({"space": SPACE, "strategy": "random", "max_trials": 3,
                       "objective": "accuracy - 0.001 * time", "stop_when": "objective > 0.9",
                       "pruner": {"halving": {"eta": 2, "metric": "f1"}}, "metrics": ["f1"],
                       "direction": "maximize", "mode": "batch", "seed": 4}, P)


@pytest.mark.parametrize("settings, path", [
    ([], P),
    ({"space": SPACE, "stratgy": "grid"}, f"{P}.stratgy"),
    ({}, f"{P}.space"),
    ({"space": SPACE, "strategy": "bayes"}, f"{P}.strategy"),
    ({"space": SPACE, "mode": "sync"}, f"{P}.mode"),
    ({"space": {"lr": {"uniform": [0, 1]}}}, f"{P}.space.lr.uniform"),
    ({"space": {"lr": {"range": [0, 1], "step": 0}}}, f"{P}.space.lr.step"),
    ({"space": SPACE, "max_trials": 0}, f"{P}.max_trials"),
    ({"space": SPACE, "max_trials": 2.5}, f"{P}.max_trials"),
    ({"space": SPACE, "time_budget": "1h"}, f"{P}.time_budget"),
    ({"space": SPACE, "objective": "accuracy - speed"}, f"{P}.objective"),
    ({"space": SPACE, "direction": "up"}, f"{P}.direction"),
    ({"space": SPACE, "stop_when": "accuracy"}, f"{P}.stop_when"),
    ({"space": SPACE, "seed": -1}, f"{P}.seed"),
    ({"space": SPACE, "pruner": {"median": {"metric": "acc"}}}, f"{P}.pruner.median.metric"),
    ({"space": SPACE, "pruner": {"median": {"direction": "x"}}}, f"{P}.pruner.median.direction"),
    ({"space": SPACE, "pruner": "asha"}, f"{P}.pruner"),
    ({"space": SPACE, "workers": 3}, f"{P}.workers"),
    ({"space": SPACE, "report_top": -1}, f"{P}.report_top"),
    ({"space": SPACE, "metrics": "f1"}, f"{P}.metrics"),
    ({"space": SPACE, "strategy": "random"}, P),
    ({"space": SPACE, "time_budget": float("nan")}, f"{P}.time_budget"),   # nan is not > 0
    ({"space": SPACE, "study": "   "}, f"{P}.study"),
    ({"space": SPACE, "checkpoints": "ckpt"}, f"{P}.checkpoints"),
    ({"space": SPACE, "checkpoints": {"keeep": 2}}, f"{P}.checkpoints.keeep"),
    ({"space": SPACE, "checkpoints": {"keep": 0}}, f"{P}.checkpoints.keep"),
    ({"space": SPACE, "checkpoints": {"keep_best": -1}}, f"{P}.checkpoints.keep_best"),
    ({"space": SPACE, "checkpoints": {"dir": ""}}, f"{P}.checkpoints.dir"),
])
def test_malformed_settings(settings, path):
    with pytest.raises(ConfigError) as info:
        validate_settings(settings, P)
    assert info.value.path == path
    assert info.value.message


# --- warnings: values YAML read as strings that were likely meant otherwise ----------

@pytest.mark.parametrize("kind, values, fragment", [
    ("values", [1e-3, "0.01"], "mixes numbers with strings that look like numbers ('0.01')"),
    ("choice", [16, " 32", "64", "wide"], "(' 32', '64')"),
    ("values", [True, "1e-3", 0.1], "('1e-3')"),
    ("values", ["yes", "no"], "'yes', 'no' are strings (diel reads YAML 1.2"),
    ("choice", ["On", "OFF"], "write true/false for booleans"),
])
def test_lookalike_values_are_a_warning_naming_the_key(kind, values, fragment):
    strategy = {"strategy": "random", "max_trials": 2} if kind == "choice" else {}
    with pytest.warns(ConfigWarning) as caught:
        validate_settings({"space": {"lr": {kind: values}}, **strategy}, P)
    (warning,) = caught
    assert warning.message.path == f"{P}.space.lr.{kind}"
    assert fragment in warning.message.message


@pytest.mark.parametrize("values", [[1e-3, 0.01], ["0.01", "0.1"], ["relu", "tanh"],
                                    [1, "wide"], ["yes", "no", "maybe"], [True, False]])
def test_values_meant_as_written_give_no_warning(values):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        validate_settings({"space": {"lr": {"values": values}}}, P)


def test_a_memory_database_is_allowed_with_a_warning(tmp_path):
    """``database: memory://`` validates (the master opens the in-memory store) with a
    warning that the results end with the job; nothing is written beside the workflow."""
    path = workflow(tmp_path, "      space: {x: {values: [1, 2]}}\n      database: memory://")
    _, found = load_checked(str(path))
    [warning] = found
    assert warning.path == "modules.search.settings.database"
    assert warning.message.startswith("memory:// keeps the results in the search master's "
                                      "memory: they are gone when the job ends")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wf.yaml"]


def test_checkpoints_default_to_keeping_one_and_the_best_ones_final():
    assert parse_settings({"space": SPACE}, P).checkpoints == CheckpointSettings(None, 1, 1)
    given = parse_settings({"space": SPACE, "checkpoints": {"dir": "/scratch/c", "keep": 3,
                                                            "keep_best": 0}}, P)
    assert given.checkpoints == CheckpointSettings("/scratch/c", 3, 0)


def test_a_checkpoint_folder_that_cannot_be_made_is_one_line_at_its_key(tmp_path):
    (tmp_path / "a-file").write_text("")
    path = workflow(tmp_path, "      space: {x: {values: [1, 2]}}\n"
                              "      checkpoints: {dir: a-file/ckpt}")
    with pytest.raises(ConfigError) as info:
        load_checked(str(path))
    assert info.value.path == f"{P}.checkpoints.dir"
    assert info.value.message == f"{tmp_path / 'a-file' / 'ckpt'} cannot be created: " \
                                 f"{tmp_path / 'a-file'} is a file, not a folder"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "wf.yaml"]


def test_an_unusable_default_checkpoint_folder_is_a_warning(tmp_path):
    """With no file database the default folder is ``checkpoints`` beside the workflow;
    a search whose trials never checkpoint does not need it, so it is only a warning."""
    (tmp_path / "checkpoints").write_text("")
    path = workflow(tmp_path, "      space: {x: {values: [1, 2]}}\n      database: memory://")
    _, found = load_checked(str(path))
    warning = next(w for w in found if w.path == f"{P}.checkpoints")
    assert warning.message.startswith(f"{tmp_path / 'checkpoints'} cannot be created: ")
    assert warning.message.endswith(f"set {P}.checkpoints.dir to a folder the search may write")


def test_a_usable_checkpoint_folder_is_checked_and_not_created(tmp_path):
    path = workflow(tmp_path, "      space: {x: {values: [1, 2]}}\n"
                              "      checkpoints: {dir: deep/er/ckpt}")
    load_checked(str(path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wf.yaml"]


def test_the_builtins_whose_module_the_master_does_not_import_define_no_searched_check():
    """The master's check names these builtins' Python modules without importing them
    (diel.search.settings._worker_module_name): a ``check_searched_params`` added to one
    would never be called."""
    assert UNCHECKED_BUILTINS <= BUILTINS["diel.modules"].keys()
    for name in UNCHECKED_BUILTINS:
        module = importlib.import_module(BUILTINS["diel.modules"][name].partition(":")[0])
        assert not hasattr(module, "check_searched_params"), name


@pytest.mark.parametrize("workers", ["worker", "trainer"])
def test_the_master_s_check_imports_no_worker_runtime(tmp_path, workers):
    """The search master's rank checks its module (and its workers' hooks) without
    importing diel.worker.module: its trial runners are the workers' (a fresh
    interpreter, as a rank of ``diel run``)."""
    settings = "{run: 't.py:f'}" if workers == "worker" else "{}"
    (tmp_path / "wf.yaml").write_text(
        "modules:\n  space: {function: tuplespace}\n"
        "  search: {function: search, settings: {workers: w, space: {epochs: {values: [1, 2]}}}}\n"
        f"  w: {{function: {workers}, settings: {settings}}}\nservices: [space]\n")
    (tmp_path / "t.py").write_text("def f(trial):\n    return 1.0\n")
    check = ("import sys; from diel.cli import load_checked; load_checked(sys.argv[1], 1, 3); "
             "print(sorted(name for name in sys.modules if name.startswith('diel.worker.')))")
    done = subprocess.run([sys.executable, "-c", check, str(tmp_path / "wf.yaml")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "diel.worker.module" not in done.stdout
