"""A worker's settings checked as fully as a module's, before anything runs: the function
``run:`` names is found in its source without importing it, a program's placeholders
against the search space and the fixed params, and the study against the search's."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from diel.cli import load_checked
from diel.errors import ConfigError
from diel.worker.loading import check_run_spec
from diel.worker.settings import PROGRAM_FIELDS, check_searched_program

SOURCE = '''\
import json
import numpy as np
from os import path as os_path
from collections import *
try:
    from fast_kernels import objective_fast
except ImportError:
    def objective_fast(trial):
        return 0.0
if True:
    with open(__file__) as handle:
        pass
class Objective:
    def __call__(self, trial):
        return 1.0
objective_instance = Objective()
first, (second, *rest) = 1, (2, 3)
scaled: float = 2.0
def objective(trial):
    return 1.0
async def objective_async(trial):
    return 1.0
def helper():
    pass
'''


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.parametrize("name", ["objective", "objective_async", "Objective",
                                  "objective_instance", "objective_fast", "json", "np",
                                  "os_path", "first", "second", "rest", "scaled", "handle"])
def test_every_kind_of_top_level_binding_counts(tmp_path, name):
    write(tmp_path, "train.py", SOURCE)
    check_run_spec(f"train.py:{name}", tmp_path)


@pytest.mark.parametrize("name, message", [
    ("objectiv", "train.py has no top-level function 'objectiv'; did you mean 'objective'?"),
    ("objective_asnyc", "did you mean 'objective_async'?"),
    ("zzz", "train.py has no top-level function 'zzz'; its functions are objective, "
            "objective_async, helper"),
    ("__call__", "no top-level function '__call__'"),   # a method is not at the top level
])
def test_a_missing_function_is_refused_with_the_closest_name(tmp_path, name, message):
    write(tmp_path, "train.py", SOURCE.replace("from collections import *\n", ""))
    with pytest.raises(ValueError) as error:
        check_run_spec(f"train.py:{name}", tmp_path)
    assert message in str(error.value)


def test_nothing_is_imported_and_nothing_runs(tmp_path):
    marker = tmp_path / "ran"
    write(tmp_path, "train.py", f"open({str(marker)!r}, 'w').close()\n"
                                "def objective(trial):\n    return 1.0\n")
    check_run_spec("train.py:objective", tmp_path)
    with pytest.raises(ValueError, match="did you mean 'objective'"):
        check_run_spec("train.py:objectiv", tmp_path)
    assert not marker.exists()


def test_a_file_that_does_not_parse_names_its_line(tmp_path):
    write(tmp_path, "train.py", "import os\n\ndef objective(trial)\n    return 1\n")
    with pytest.raises(ValueError, match=r"^train.py, line 3: expected ':'; the file cannot "
                                         r"be imported$"):
        check_run_spec("train.py:objective", tmp_path)


def test_star_imports_and_module_getattr_may_provide_any_name(tmp_path):
    write(tmp_path, "star.py", "from json import *\n")
    write(tmp_path, "lazy.py", "def __getattr__(name):\n    return print\n")
    check_run_spec("star.py:loads", tmp_path)
    check_run_spec("lazy.py:anything", tmp_path)


def test_a_package_module_is_read_from_its_source(tmp_path, monkeypatch):
    package = tmp_path / "mypkg"
    package.mkdir()
    write(package, "__init__.py", "from mypkg.train import objective\n")
    write(package, "train.py", "def objective(trial):\n    return 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    check_run_spec("mypkg.train:objective", tmp_path)
    check_run_spec("mypkg:objective", tmp_path)   # a package: its __init__.py
    with pytest.raises(ValueError, match="mypkg.train has no top-level function 'objectiv'; "
                                         "did you mean 'objective'"):
        check_run_spec("mypkg.train:objectiv", tmp_path)
    check_run_spec("math:sqrt", tmp_path)   # compiled: no source to read, so not checked


# --- a program's placeholders ---------------------------------------------------------

def test_placeholders_may_be_searched_fixed_or_diel_fields():
    settings = {"command": ["python", "t.py", "{lr}", "{epochs}", *(f"{{{f}}}" for f in
                                                                     PROGRAM_FIELDS)],
                "params": {"epochs": 3}}
    check_searched_program(settings, ["lr"], "modules.w.settings")
    # the builtin trainer's settings sit beside its own keys: they are fixed params too
    check_searched_program({"command": ["t", "{dataset}", "{lr}"], "dataset": "x"}, ["lr"],
                           "modules.w.settings")
    check_searched_program({"run": "t.py:f"}, ["lr"], "modules.w.settings")


@pytest.mark.parametrize("command, message", [
    (["python", "t.py", "--lr", "{lrr}"], "modules.w.settings.command[3]: unknown "
                                          "placeholder {lrr}; did you mean {lr}?"),
    (["python", "t.py", "{timeout}"], "modules.w.settings.command[2]: unknown placeholder "
                                      "{timeout}; known: epochs, lr, report_file, result_file, "
                                      "trial"),
    (["python", "{lr"], "modules.w.settings.command[1]: stray brace"),
])
def test_an_unknown_placeholder_is_refused(command, message):
    with pytest.raises(ConfigError) as error:
        check_searched_program({"command": command, "params": {"epochs": 3}, "timeout": 5},
                               ["lr"], "modules.w.settings")
    assert message in str(error.value)


# --- the whole workflow: placeholders, run: and study --------------------------------

def workflow(folder: Path, worker: str, search: str = "") -> str:
    write(folder, "train.py", "def objective(trial):\n    return 1.0\n")
    path = folder / "wf.yaml"
    path.write_text("modules:\n  space: {function: tuplespace}\n  search:\n"
                    "    function: search\n    settings:\n      workers: trainer\n"
                    "      space: {lr: {values: [1e-3, 1e-2]}}\n"
                    f"{textwrap.indent(search, ' ' * 6)}\n"
                    "  trainer:\n    function: worker\n    settings:\n"
                    f"{textwrap.indent(worker, ' ' * 6)}\nservices: [space]\n")
    return str(path)


@pytest.mark.parametrize("worker, search", [
    ("command: [python, train.py, '{lr}', '{trial}']", ""),
    ("run: train.py:objective\nstudy: wf", ""),
    ("run: train.py:objective\nstudy: mine", "study: mine"),
    ("run: train.py:objective", "study: mine"),   # workers serve their search's study
])
def test_workers_that_fit_their_search_pass(tmp_path, worker, search):
    load_checked(workflow(tmp_path, worker, search))


@pytest.mark.parametrize("worker, search, message", [
    ("command: [python, train.py, '{lrr}']", "",
     "modules.trainer.settings.command[2]: unknown placeholder {lrr}; did you mean {lr}?"),
    ("run: train.py:objectiv", "",
     "modules.trainer.settings.run: train.py has no top-level function 'objectiv'; "
     "did you mean 'objective'?"),
    ("run: train.py:objective\nstudy: mine", "",
     "modules.trainer.settings.study: 'mine' differs from modules.search.settings.study "
     "(not set, so the workflow's name 'wf')"),
    ("run: train.py:objective\nstudy: theirs", "study: mine",
     "modules.trainer.settings.study: 'theirs' differs from modules.search.settings.study "
     "('mine')"),
])
def test_workers_that_would_fail_every_trial_or_wait_for_ever_are_refused(
        tmp_path, worker, search, message):
    with pytest.raises(ConfigError) as error:
        load_checked(workflow(tmp_path, worker, search))
    assert message in str(error.value) and "\n" not in str(error.value)
