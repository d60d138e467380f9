"""The worker starts its isolated trial process as soon as its rank knows what it runs
(:func:`diel.worker.module.prepare`, called before the job's set-up), and :func:`main`
then uses that child instead of starting another."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from diel.executive.config import load_workflow
from diel.worker import module

WORKFLOW = """
modules:
  space: {function: tuplespace}
  search: {function: search, settings: {strategy: random, max_trials: 1,
                                        space: {x: {uniform: [0, 1]}}}}
  worker: {function: worker, settings: {run: "trial.py:objective"%s}}
services: [space]
"""


def prepared(tmp_path: Path, extra: str = "") -> None:
    (tmp_path / "trial.py").write_text("def objective(trial):\n    return {'accuracy': 1.0}\n")
    (tmp_path / "wf.yaml").write_text(WORKFLOW % extra)
    workflow = load_workflow(tmp_path / "wf.yaml")
    spec = workflow.module("worker")
    node = SimpleNamespace(local_rank=0, local_size=1, threads=1)   # NodeShare's fields,
    module.prepare(dict(spec.settings), spec, workflow, node)      # without MPI's import


def test_prepare_starts_the_child_that_the_worker_then_takes(tmp_path):
    prepared(tmp_path)
    runner = module._take_launched("trial.py:objective", tmp_path)
    try:
        assert runner is not None and runner.process is not None and not runner.loaded
        runner.start()   # waits for the child launched by prepare: no second one
        assert runner.loaded and runner.children_started == 1
    finally:
        if runner is not None:
            runner.close()
    assert module._take_launched("trial.py:objective", tmp_path) is None   # taken once


def test_a_child_for_other_code_is_ended_not_taken(tmp_path):
    prepared(tmp_path)
    launched = module._launched
    assert launched is not None
    assert module._take_launched("other.py:objective", tmp_path) is None
    assert launched.process is None   # ended


def test_nothing_is_started_for_trials_in_the_rank(tmp_path):
    prepared(tmp_path, ", isolate: false")
    assert module._launched is None
