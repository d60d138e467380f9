"""The trial object, metric cleaning, GPU binding, settings and placeholders (no MPI)."""

from __future__ import annotations

import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from diel.errors import ConfigError
from diel.executive.placeholders import fill_placeholders, placeholder_names
from diel.worker import Trial
from diel.worker.environment import trial_environment
from diel.worker.gpu import GpuBinding, bind_gpu, visible_gpus
from diel.worker.outcome import TrialOutcome, death_reason, result_report, run_objective
from diel.worker.settings import parse_settings
from diel.worker.trial import TrialPruned, clean_metrics, metrics_of_return
from tests.helpers.launch import run_diel_in_process

HERE = Path(__file__).resolve().parent


def test_report_records_and_asks_the_reporter_until_pruned():
    calls = []

    def reporter(step, metrics):
        calls.append((step, metrics))
        return step >= 2

    trial = Trial(params={"lr": 0.1}, number=3, study="s", _reporter=reporter)
    assert trial.report(1, accuracy=np.float32(0.5)) is False
    assert trial.report(2, accuracy=0.6) is True
    assert trial.report(3, accuracy=0.7) is True   # pruned stays pruned; not asked again
    assert calls == [(1, {"accuracy": 0.5}), (2, {"accuracy": 0.6})]
    assert (trial.last_step, trial.last_metrics) == (3, {"accuracy": 0.7})
    with pytest.raises(TypeError, match="step must be an int"):
        trial.report(1.5, accuracy=1)


def test_a_trial_without_reporter_is_usable_in_plain_tests():
    assert Trial(params={}, number=0, study="t").report(1, loss=0.3) is False


def test_metrics_are_cleaned_and_returns_are_understood():
    assert clean_metrics({"a": np.float64(1.5), "b": "x", "c": None, "d": 2}) == \
        {"a": 1.5, "b": "x", "c": None, "d": 2}
    with pytest.raises(TypeError, match="metric 'w' must be a number"):
        clean_metrics({"w": [1, 2]})
    assert metrics_of_return({"accuracy": np.float32(0.25)}) == ({"accuracy": 0.25}, None)
    assert metrics_of_return(0.5) == ({}, 0.5)
    assert math.isnan(metrics_of_return(float("nan"))[1])
    assert metrics_of_return(None) == ({}, None)
    with pytest.raises(TypeError, match="returned a bool"):
        metrics_of_return(True)
    with pytest.raises(TypeError, match="mapping of metrics"):
        metrics_of_return("good")


def test_run_objective_turns_every_python_ending_into_an_outcome():
    def make(body):
        def objective(trial):
            trial.report(1, accuracy=0.1)
            return body()
        return objective

    def prune():
        raise TrialPruned()

    def leave():
        raise SystemExit(3)

    def fail():
        raise KeyError("k")

    trial = lambda: Trial(params={}, number=0, study="t")   # noqa: E731 - a fresh one each
    assert run_objective(make(lambda: {"accuracy": 0.9}), trial()).status == "ok"
    assert run_objective(make(prune), trial()).status == "pruned"
    left = run_objective(make(leave), trial())
    assert (left.status, left.error) == ("failed", "the trial called sys.exit(3)")
    failed = run_objective(make(fail), trial())
    assert failed.status == "failed" and failed.error.startswith("KeyError: 'k' (at test_trial.py:")
    assert failed.metrics == {"accuracy": 0.1} and failed.step == 1


def test_death_reasons_and_result_reports():
    assert death_reason(-11) == "killed by SIGSEGV"
    assert death_reason(-9).startswith("killed by SIGKILL (also how the kernel ends a process out of memory")
    assert death_reason(3) == "the trial's process exited with status 3"
    report = result_report(7, 2, TrialOutcome("ok", {"accuracy": 0.5, "f1": 0.4, "epoch": 3}, 0.5), 0.0)
    assert report["kind"] == "result" and report["trial"] == 7 and report["worker"] == 2
    assert report["accuracy"] == 0.5 and report["epoch"] == 3 and report["value"] == 0.5
    assert report["metrics"] == {"f1": 0.4} and report["time"] > 0


@pytest.mark.parametrize("environ, devices, expected", [
    ({"CUDA_VISIBLE_DEVICES": "2,3"}, [], ["2", "3"]),
    ({"CUDA_VISIBLE_DEVICES": ""}, ["nvidia0"], []),
    ({"CUDA_VISIBLE_DEVICES": "1,-1,2"}, [], ["1"]),
    ({"CUDA_VISIBLE_DEVICES": "GPU-abc"}, [], ["GPU-abc"]),
    ({}, ["nvidia1", "nvidia0", "nvidiactl", "nvidia-uvm"], ["0", "1"]),
    ({}, [], []),
])
def test_visible_gpus_from_the_environment_or_device_files(tmp_path, environ, devices, expected):
    for name in devices:
        (tmp_path / name).touch()
    assert visible_gpus(environ, tmp_path) == expected


def test_each_local_rank_gets_one_gpu_round_robin():
    gpus = ["4", "5", "6"]
    assert [bind_gpu(rank, gpus) for rank in range(4)] == [
        GpuBinding(0, "4"), GpuBinding(1, "5"), GpuBinding(2, "6"), GpuBinding(0, "4")]
    assert bind_gpu(0, []) is None


def test_a_trial_process_sees_its_gpu_and_no_launcher_variables():
    base = {"PMI_RANK": "3", "HYDRA_CONTROL_FD": "9", "MPI_LOCALNRANKS": "4", "PATH": "/bin",
            "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "2,3"}
    env = trial_environment(GpuBinding(1, "3"), {"X": "y"}, base=base)
    assert env == {"PATH": "/bin", "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "3", "X": "y"}


@pytest.mark.parametrize("settings, size, key, message", [
    ({"run": "behaviours.py:objective", "timeout": 0}, 1, "s.timeout", "positive number"),
    ({"run": "behaviours.py:objective", "tmeout": 5}, 1, "s.tmeout", "unknown setting"),
    ({"run": "missing.py:objective"}, 1, "s.run", "no such file"),
    ({"run": "no_such_package_xyz.mod:f"}, 1, "s.run", "cannot find module"),
    ({"run": "behaviours.py"}, 1, "s.run", "expected 'file.py:function'"),
    ({}, 1, "s", "a worker needs run"),
    ({"run": "behaviours.py:objective", "command": ["x"]}, 1, "s", "not both"),
    ({"command": "python train.py"}, 1, "s.command", "non-empty list"),
    ({"command": ["python", "t.py"]}, 2, "s.command", "needs size: 1"),
    ({"command": ["no-such-program-xyz", "t.py"]}, 1, "s.command[0]",
     "program 'no-such-program-xyz' not found on PATH or beside the workflow"),
    ({"run": "behaviours.py:objective", "isolate": True}, 2, "s.isolate", "needs size: 1"),
    ({"run": "behaviours.py:objective", "max_attempts": 0}, 1, "s.max_attempts", ">= 1"),
    ({"run": "behaviours.py:objective", "params": [1]}, 1, "s.params", "mapping"),
])
def test_bad_worker_settings_name_their_key(settings, size, key, message):
    with pytest.raises(ConfigError) as error:
        parse_settings(settings, "s", HERE, size)
    assert error.value.path == key and message in error.value.message


def test_a_program_is_found_as_an_executable_module_finds_it(tmp_path):
    """A leading python is diel's own interpreter (a batch script may call .venv/bin/diel
    with no venv on PATH, where python would be another one without the user's
    packages); a relative path is looked up beside the workflow; a name on PATH."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "train.sh").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "train.sh").chmod(0o755)
    found = {name: parse_settings({"command": [name, "{lr}"]}, "s", tmp_path).command
             for name in ("python", "python3", "bin/train.sh", "env")}
    assert found["python"] == found["python3"] == [sys.executable, "{lr}"]
    assert found["bin/train.sh"] == [str(tmp_path / "bin" / "train.sh"), "{lr}"]
    assert found["env"] == [shutil.which("env"), "{lr}"]


def test_defaults_isolate_one_rank_trials_only():
    settings = parse_settings({"run": "behaviours.py:objective"}, "s", HERE)
    assert settings.isolated(1) and not settings.isolated(2)
    assert settings.max_attempts == 2 and settings.grace == 5.0 and settings.timeout is None


def test_diel_validate_names_a_worker_typo(tmp_path):
    (tmp_path / "train.py").write_text("def objective(trial):\n    return 1.0\n")
    path = tmp_path / "wf.yaml"
    path.write_text("modules:\n  space: {function: tuplespace}\n"
                    "  search: {function: search, settings: {space: {x: {values: [1]}}}}\n"
                    "  trainer: {function: worker, size: 2, settings: {run: train.py:objective, "
                    "isolate: true}}\nservices: [space]\n")
    result = run_diel_in_process("validate", str(path))
    assert result.returncode == 2
    assert "modules.trainer.settings.isolate: isolate: true needs size: 1" in result.stderr
    assert "Traceback" not in result.stderr


def test_placeholders_are_literal_and_strict():
    assert fill_placeholders(["--lr={lr}", "{act}", "{{x}}"], {"lr": 0.01, "act": "a b;rm"}) == \
        ["--lr=0.01", "a b;rm", "{x}"]
    assert placeholder_names("{a}-{b}{{c}}") == ["a", "b"]
    for bad in (["{lr"], ["{0}"], ["{lr.real}"], ["{x:>5}"]):
        with pytest.raises(ValueError):
            fill_placeholders(bad, {"lr": 1, "x": 2})
    with pytest.raises(ValueError, match="unknown placeholder {y}"):
        fill_placeholders(["{y}"], {"x": 1})
