"""Worker helpers: serve_tasks over the protocol, and the command trial runner."""

from __future__ import annotations

import sys
import textwrap

import pytest

from trainer.worker import TrialFailed, TrialPruned, fill_argv, run_command_trial, \
    serve_tasks
from tests.search.fakespace import FakeSpace


def reports(space: FakeSpace) -> list[dict]:
    return [v for tag, v in space.log if tag == "st/report"]


def test_serve_tasks_reports_epochs_results_and_failures():
    space = FakeSpace()
    space.tput("st/task", {"trial": 0, "params": {"x": 2}})
    space.tput("st/task", {"trial": 1, "params": {"x": 0}})
    space.tput("st/task", None)

    def run(params, report):
        assert report(1, {"accuracy": 0.5}) is False
        return {"accuracy": 1 / params["x"], "loss": 0.1, "f1": 0.3}
    assert serve_tasks(space, "st", 4, run) == 2
    epoch, ok, _, failed = reports(space)
    assert epoch["kind"] == "epoch" and epoch["metrics"]["accuracy"] == 0.5 and epoch["worker"] == 4
    assert ok["status"] == "ok" and ok["accuracy"] == 0.5 and ok["epoch"] == 1
    assert ok["metrics"] == {"f1": 0.3} and ok["time"] >= 0 and ok["error"] is None
    assert failed["status"] == "failed" and failed["error"].startswith("ZeroDivisionError")
    assert failed["epoch"] == 1 and failed["accuracy"] == 0.5  # the last epoch's metrics


@pytest.mark.parametrize("raise_it", [False, True])
def test_prune_order_stops_the_trial(raise_it):
    space = FakeSpace()
    space.tput("st/task", {"trial": 7, "params": {}})
    space.tput("st/task", None)
    space.tput("st/prune/7", True)

    def run(params, report):
        for epoch in range(1, 10):
            if report(epoch, {"accuracy": 0.1 * epoch}):
                if raise_it:
                    raise TrialPruned()
                return {"accuracy": 0.1 * epoch}
        return {"accuracy": 1.0}
    serve_tasks(space, "st", 0, run)
    result = reports(space)[-1]
    assert result["status"] == "pruned" and result["epoch"] == 1
    assert result["accuracy"] == pytest.approx(0.1)


def test_fill_argv_is_literal_and_strict():
    assert fill_argv(["--lr={lr}", "{act}", "{{x}}"], {"lr": 0.01, "act": "a b;rm"}) == \
        ["--lr=0.01", "a b;rm", "{x}"]
    for bad in (["{nope}"], ["{lr.real}"], ["{"]):
        with pytest.raises(ValueError):
            fill_argv(bad, {"lr": 1})


TRAIN = textwrap.dedent("""
    import json, os, sys, time
    lr = float(sys.argv[1])
    if lr < 0:
        print("bad lr", file=sys.stderr); sys.exit(3)
    if lr == 0:
        time.sleep(5)
    params = json.loads(os.environ["DIEL_PARAMS"])
    with open(sys.argv[2], "w") as f:
        json.dump({"accuracy": 1 - lr, "loss": lr, "seen": params["lr"],
                   "same": sys.argv[2] == os.environ["DIEL_RESULT_FILE"]}, f)
""")


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(TRAIN)
    return [sys.executable, str(path), "{lr}", "{result_file}"]


def test_command_trial_success(script):
    metrics = run_command_trial(script, {"lr": 0.25}, timeout=30)
    assert metrics["accuracy"] == 0.75 and metrics["seen"] == 0.25 and metrics["same"] is True
    assert metrics["time"] > 0


def test_command_trial_nonzero_exit(script):
    with pytest.raises(TrialFailed, match="exit status 3: bad lr"):
        run_command_trial(script, {"lr": -1}, timeout=30)


def test_command_trial_timeout(script):
    with pytest.raises(TrialFailed, match="timed out after 0.5 s"):
        run_command_trial(script, {"lr": 0}, timeout=0.5)


def test_command_trial_without_result_file():
    with pytest.raises(TrialFailed, match="wrote no result file"):
        run_command_trial([sys.executable, "-c", "pass"], {}, timeout=30)
    with pytest.raises(TrialFailed, match="cannot run"):
        run_command_trial(["/nonexistent/train"], {}, timeout=30)
