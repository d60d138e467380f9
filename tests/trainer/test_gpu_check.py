"""benchmarks/gpu_check.py on a machine without a GPU: one line saying so, exit 0; and its
step runner turns a hang or a failure into a row instead of a traceback."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

from tests.helpers.launch import REPO

SCRIPT = REPO / "benchmarks" / "gpu_check.py"


def test_without_a_gpu_it_says_so_in_one_line():
    env = {**os.environ, "DIEL_TRAINER_NO_CUPY": "1"}
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=60, env=env,
                          cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 1 and done.stderr == ""
    assert done.stdout.startswith("gpu_check: no GPU here (DIEL_TRAINER_NO_CUPY is set)")


def load(monkeypatch):
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "gpu_check", module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_a_step_that_hangs_or_fails_becomes_a_failed_row(monkeypatch):
    gpu_check = load(monkeypatch)
    ok, _, why = gpu_check.run_step([sys.executable, "-c", "import time; time.sleep(30)"], 1)
    assert not ok and why == "timed out after 1 s"
    ok, _, why = gpu_check.run_step([sys.executable, "-c", "raise SystemExit('broken')"], 30)
    assert not ok and why == "exit 1: broken"
    row = gpu_check.timed("a check", lambda: 1 / 0)
    assert not row.ok and row.figures.startswith("ZeroDivisionError")
    assert gpu_check.last_json('noise\n{"a": 1}\n{"b": 2}\ntail') == {"b": 2}
