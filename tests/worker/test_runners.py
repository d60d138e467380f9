"""The runners without MPI: an isolated child, a program per trial, the serve loop."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from diel.errors import ModuleFailed
from diel.search.protocol import prune_tag, report_tag, task_tag
from diel.worker.inprocess import InProcessRunner
from diel.worker.isolated import IsolatedRunner
from diel.worker.program import ProgramRunner, ReportFile
from diel.worker.serve import serve_tasks
from tests.helpers.fakespace import FakeSpace
from tests.helpers.links import ScriptedLink, scripted

HERE = Path(__file__).resolve().parent


def info(number: int = 0, **params) -> dict:
    return {"number": number, "study": "s", "copy": 0, "device": None, "params": params}


never = ScriptedLink()   # a master that never stops a trial


@pytest.fixture
def isolated():
    runner = IsolatedRunner("behaviours.py:objective", HERE, dict(os.environ), grace=1.0)
    yield runner
    runner.close()


def test_the_child_is_reused_and_survives_failures_it_can_catch(isolated):
    first = isolated.run(info(mode="ok"), never, None)
    for mode in ("raise", "sysexit", "number"):
        isolated.run(info(mode=mode), never, None)
    again = isolated.run(info(mode="ok"), never, None)
    assert first.status == again.status == "ok"
    assert first.metrics["pid"] == again.metrics["pid"] and isolated.children_started == 1


@pytest.mark.parametrize("mode, reason", [("segfault", "killed by SIGSEGV"),
                                          ("abort", "killed by SIGABRT"),
                                          ("killed", "killed by SIGKILL (also how the kernel"),
                                          ("exit", "exited with status 3")])
def test_a_dead_child_is_a_failed_trial_and_is_replaced(isolated, mode, reason):
    outcome = isolated.run(info(mode=mode), never, None)
    assert outcome.status == "failed" and reason in outcome.error
    assert outcome.metrics == {"accuracy": 0.1, "loss": 2.0} and outcome.step == 1
    assert isolated.run(info(mode="ok"), never, None).status == "ok"
    assert isolated.children_started == 2


def test_segfault_reason_quotes_the_python_stack(isolated):
    outcome = isolated.run(info(mode="segfault"), never, None)
    assert "Fatal Python error: Segmentation fault" in outcome.error
    assert "behaviours.py" in outcome.error


def test_a_hanging_trial_is_stopped_at_its_timeout(isolated):
    started = time.monotonic()
    outcome = isolated.run(info(mode="hang"), never, 1.0)
    assert time.monotonic() - started < 1.0 + 1.0 + 2.0
    assert outcome.status == "failed" and outcome.error.startswith("timed out after 1 s")
    assert "hanging now" in outcome.error   # the last stderr lines
    assert isolated.run(info(mode="ok"), never, None).status == "ok"


def test_reports_reach_the_reporter_and_a_prune_order_reaches_the_trial():
    runner = IsolatedRunner("behaviours.py:reporting", HERE, dict(os.environ), grace=1.0)
    seen = []

    def reporter(step, metrics):
        seen.append(step)
        return step == 3

    outcome = runner.run(info(steps=10), scripted(reporter), None)
    runner.close()
    assert seen == [1, 2, 3] and outcome.status == "pruned"
    assert outcome.metrics == {"accuracy": pytest.approx(0.3)}


def test_a_reporting_trial_past_its_timeout_is_told_to_stop():
    runner = IsolatedRunner("behaviours.py:reporting", HERE, dict(os.environ), grace=1.0)
    outcome = runner.run(info(steps=100, pause=0.05), never, 0.5)
    runner.close()
    assert outcome.status == "failed" and outcome.error == "timed out after 0.5 s"
    assert 5 <= outcome.step < 100


def test_a_function_that_cannot_load_ends_the_worker_with_the_cause(tmp_path):
    (tmp_path / "broken.py").write_text("import no_such_module_xyz\n")
    runner = IsolatedRunner("broken.py:objective", tmp_path, dict(os.environ), grace=1.0)
    with pytest.raises(ModuleFailed, match="no_such_module_xyz"):
        runner.run(info(), never, None)


def write_program(tmp_path: Path, body: str) -> list[str]:
    script = tmp_path / "train.py"
    script.write_text("import json, os, sys, time\n"
                      "report = open(os.environ['DIEL_REPORT_FILE'], 'a', buffering=1)\n" + body)
    return [sys.executable, str(script), "{lr}"]


def test_a_program_reports_each_line_and_writes_its_result(tmp_path):
    argv = write_program(tmp_path, (
        "lr = float(sys.argv[1])\n"
        "assert json.loads(os.environ['DIEL_PARAMS']) == {'lr': lr}\n"
        "for step in (1, 2):\n"
        "    report.write(json.dumps({'step': step, 'accuracy': lr * step}) + '\\n')\n"
        "json.dump({'accuracy': 0.5, 'loss': 0.2}, open(os.environ['DIEL_RESULT_FILE'], 'w'))\n"))
    seen = []
    outcome = ProgramRunner(argv, tmp_path, dict(os.environ), 1.0).run(
        info(lr=0.25), scripted(lambda step, metrics: bool(seen.append((step, metrics)))), 30)
    assert outcome.status == "ok" and outcome.metrics == {"accuracy": 0.5, "loss": 0.2}
    assert seen == [(1, {"accuracy": 0.25}), (2, {"accuracy": 0.5})]


def test_a_pruned_program_is_stopped(tmp_path):
    argv = write_program(tmp_path, (
        "for step in range(1, 1000):\n"
        "    report.write(json.dumps({'step': step, 'accuracy': 0.1}) + '\\n')\n"
        "    time.sleep(0.05)\n"))
    started = time.monotonic()
    outcome = ProgramRunner(argv, tmp_path, dict(os.environ), 1.0).run(
        info(lr=1), scripted(lambda step, metrics: step >= 3), 60)
    assert outcome.status == "pruned" and outcome.step >= 3
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("body, reason", [
    ("time.sleep(30)\n", "timed out after 1 s"),
    ("print('CUDA out of memory (planted)', file=sys.stderr)\nsys.exit(4)\n", "exited with status 4"),
    ("pass\n", "wrote no result file"),
    ("report.write('not json\\n')\njson.dump(1, open(os.environ['DIEL_RESULT_FILE'], 'w'))\n",
     "malformed line"),
    ("open(os.environ['DIEL_RESULT_FILE'], 'w').write('[1')\n", "unreadable result file"),
])
def test_program_failures_say_why(tmp_path, body, reason):
    outcome = ProgramRunner(write_program(tmp_path, body), tmp_path, dict(os.environ), 1.0).run(
        info(lr=1), never, 1)
    assert outcome.status == "failed" and reason in outcome.error, outcome.error
    if "status 4" in reason:
        assert "CUDA out of memory (planted)" in outcome.error


def test_a_missing_program_or_placeholder_is_a_failed_trial(tmp_path):
    runner = ProgramRunner(["/nonexistent/train"], tmp_path, {}, 1.0)
    assert "cannot run '/nonexistent/train'" in runner.run(info(), never, 5).error
    runner = ProgramRunner(["echo", "{width}"], tmp_path, {}, 1.0)
    assert "unknown placeholder {width}" in runner.run(info(lr=1), never, 5).error


def test_a_report_line_being_written_waits_for_its_end(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"step": 1, "a": 1}\n{"step": 2,')
    reports = ReportFile(path)
    assert reports.new_reports() == [(1, {"a": 1})]
    with open(path, "a") as stream:
        stream.write(' "a": 2}\n')
    assert reports.new_reports() == [(2, {"a": 2})]


def test_serve_tasks_reports_epochs_results_and_prunes():
    space = FakeSpace()
    space.tput(task_tag("st"), {"trial": 0, "params": {"quality": 0.1, "steps": 3}})
    space.tput(task_tag("st"), {"trial": 1, "params": {"quality": 0.2, "steps": 5}})
    space.tput(prune_tag("st", 1), True)
    space.tput(task_tag("st"), None)
    from tests.worker.behaviours import reporting
    assert serve_tasks(space, "st", 4, InProcessRunner(reporting), params={"pause": 0}) == 2
    reports = []
    while isinstance(value := space.try_tget(report_tag("st")), (dict, list)):
        reports += value if isinstance(value, list) else [value]   # a result and next start
    assert [r["trial"] for r in reports if r["kind"] == "start"] == [0, 1]
    results = {r["trial"]: r for r in reports if r["kind"] == "result"}
    epochs = [r for r in reports if r["kind"] == "epoch"]
    assert results[0]["status"] == "ok" and results[0]["accuracy"] == pytest.approx(0.3)
    assert results[1]["status"] == "pruned" and results[1]["epoch"] == 1
    assert {r["worker"] for r in reports} == {4}
    assert [e["epoch"] for e in epochs if e["trial"] == 0] == [1, 2, 3]
    assert all(e["metrics"]["time"] >= 0 for e in epochs)
