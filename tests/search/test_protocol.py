"""The worker's side of the search protocol without MPI: which study a worker serves
(its search's), where its checkpoints go (its search's folder), and the fatal report of a
worker whose function cannot be loaded."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from diel.executive.config import load_yaml, parse_workflow
from diel.errors import ConfigError
from diel.search.protocol import checkpoint_dir, checkpoint_dir_of_search, \
    checkpoint_dir_served, is_report, searches_served_by, study_of_search
from diel.worker.module import run_worker, served_study
from diel.worker.settings import parse_settings
from tests.helpers.fakespace import FakeSpace


def workflow(tmp_path: Path, text: str):
    path = tmp_path / "wf.yaml"
    path.write_text(text)
    return parse_workflow(load_yaml(text), path)


def context(tmp_path: Path, text: str, name: str = "trainer", **extra) -> SimpleNamespace:
    """A worker module's ``ctx`` in the workflow ``text`` (its ``train.py`` kept if there)."""
    if not (tmp_path / "train.py").exists():
        (tmp_path / "train.py").write_text("def objective(trial):\n    return 1.0\n")
    flow = workflow(tmp_path, text)
    return SimpleNamespace(name=name, copy=0, rank=0, size=1, local_rank=0, workflow=flow,
                           workflow_name="wf", workflow_dir=str(tmp_path), space=FakeSpace(),
                           log=logging.getLogger("test"), comm=None, **extra)


SEARCH = """\
modules:
  space: {{function: tuplespace}}
  search: {{function: search, settings: {{workers: trainer, {search}space: {{x: {{values: [1]}}}}}}}}
  trainer: {{function: worker, settings: {{run: 'train.py:objective'{worker}}}}}
services: [space]
"""


def test_the_study_of_a_search_is_its_setting_or_the_workflow_name():
    assert study_of_search({"study": "mine"}, "wf") == "mine"
    assert study_of_search({}, "wf") == "wf"
    assert study_of_search({"study": "  "}, "wf") == "wf"


@pytest.mark.parametrize("search, worker, study", [
    ("study: mine, ", "", "mine"),           # set on the search alone: the workers follow
    ("study: mine, ", ", study: mine", "mine"),  # set on both, agreeing
    ("", "", "wf"),                          # set nowhere: the workflow's name
])
def test_workers_serve_their_search_study(tmp_path, search, worker, study):
    ctx = context(tmp_path, SEARCH.format(search=search, worker=worker))
    settings = parse_settings(ctx.workflow.module("trainer").settings, "s", tmp_path)
    assert served_study(ctx, settings) == study


def test_a_worker_study_that_disagrees_with_its_search_is_refused(tmp_path):
    ctx = context(tmp_path, SEARCH.format(search="study: mine, ", worker=", study: wf"))
    settings = parse_settings(ctx.workflow.module("trainer").settings, "s", tmp_path)
    with pytest.raises(ConfigError, match=r"^modules.trainer.settings.study: 'wf', but the search "
                                          r"modules.search that this module serves runs study "
                                          r"'mine'"):
        served_study(ctx, settings)


def test_a_worker_no_builtin_search_names_keeps_its_own_study(tmp_path):
    ctx = context(tmp_path, "modules:\n  trainer: {function: worker, settings: "
                            "{run: 'train.py:objective', study: own}}\n")
    settings = parse_settings(ctx.workflow.module("trainer").settings, "s", tmp_path)
    assert searches_served_by(ctx.workflow, "trainer") == []
    assert served_study(ctx, settings) == "own"


@pytest.mark.parametrize("search, folder", [
    ("", "wf.db.checkpoints"),                                  # beside the default database
    ("database: results/r.db, ", "results/r.db.checkpoints"),   # beside the one named
    ("database: memory://, ", "checkpoints"),                   # no file: beside the workflow
    ("database: memory://, checkpoints: {dir: ckpt}, ", "ckpt"),  # set: relative to the workflow
])
def test_workers_keep_checkpoints_where_their_search_says(tmp_path, search, folder):
    ctx = context(tmp_path, SEARCH.format(search=search, worker=""))
    assert checkpoint_dir_served(ctx.workflow, "trainer") == tmp_path / folder
    assert checkpoint_dir_of_search(ctx.workflow.module("search").settings, tmp_path, "wf") == \
        tmp_path / folder


def test_checkpoints_go_where_they_are_set_and_beside_a_sqlite_url(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)   # a relative SQLite URL is a file in the working folder
    assert checkpoint_dir(None, "sqlite:///rel.db", "/elsewhere") == tmp_path / "rel.db.checkpoints"
    assert checkpoint_dir(None, "postgresql+psycopg://u@h/db", "/w") == Path("/w/checkpoints")
    assert checkpoint_dir("/abs/ck", "sqlite:////x/r.db", "/w") == Path("/abs/ck")
    assert checkpoint_dir("~/ck", "memory://", "/w") == Path.home() / "ck"


def test_a_worker_no_builtin_search_names_keeps_checkpoints_beside_the_workflow(tmp_path):
    ctx = context(tmp_path, "modules:\n  trainer: {function: worker, settings: "
                            "{run: 'train.py:objective', study: own}}\n")
    assert checkpoint_dir_served(ctx.workflow, "trainer") == tmp_path / "checkpoints"


def test_one_worker_module_for_two_studies_is_refused(tmp_path):
    again = "  again: {function: search, settings: {study: other, space: {x: {values: [1]}}}}\n"
    ctx = context(tmp_path, SEARCH.format(search="", worker="").replace("services:",
                                                                         again + "services:"))
    assert [spec.name for spec in searches_served_by(ctx.workflow, "trainer")] == \
        ["search", "again"]   # ``workers`` is 'trainer' by default
    settings = parse_settings(ctx.workflow.module("trainer").settings, "s", tmp_path)
    with pytest.raises(ConfigError, match="is the workers of modules.search .study 'wf'., "
                                          "modules.again .study 'other'.; a worker module serves "
                                          "one study"):
        served_study(ctx, settings)


@pytest.mark.parametrize("isolate", [True, False])
def test_a_function_that_cannot_be_loaded_is_a_fatal_report_not_a_crash(tmp_path, isolate):
    (tmp_path / "train.py").write_text("raise ImportError('planted')\n"
                                       "def objective(trial):\n    return 1.0\n")
    ctx = context(tmp_path, SEARCH.format(search="", worker=f", isolate: {str(isolate).lower()}"))
    settings = parse_settings(ctx.workflow.module("trainer").settings, "s", tmp_path)
    ctx.space.tput("wf/task", {"trial": 0, "params": {"x": 1}})
    run_worker(ctx, settings)
    [report] = [value for tag, value in ctx.space.log if tag == "wf/report"]
    assert is_report(report) and report == {
        "kind": "fatal", "worker": 0, "rank": 0, "setting": "run",
        "error": "cannot load the trial function train.py:objective: ImportError: planted "
                 "(at train.py:1)"}
    assert ctx.space.pending() == {"wf/task": 1, "wf/report": 1}   # the task was not taken
