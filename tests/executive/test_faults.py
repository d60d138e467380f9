"""Failures end the whole job quickly, and waiting ranks sleep instead of spinning."""

from __future__ import annotations

import re
import time

import pytest

from tests.helpers.launch import run_diel

pytestmark = pytest.mark.mpi

PROBES = "tests.executive.probes"


def test_exception_on_one_rank_ends_a_four_rank_job(tmp_path):
    path = tmp_path / "crash.yaml"
    path.write_text(f"modules:\n  crashy: {{function: '{PROBES}:raise_on_rank', size: 4, "
                    f"settings: {{rank: 2}}}}\n")
    started = time.monotonic()
    result = run_diel("run", str(path), n=4, timeout=60)
    elapsed = time.monotonic() - started
    assert result.returncode != 0
    assert elapsed < 30
    assert "module 'crashy' failed on copy 0, rank 2 (world rank 2), iteration 0" in result.stderr
    assert "ValueError: boom from the test module" in result.stderr
    assert "Traceback" in result.stderr  # the module's own traceback is logged


def test_failing_program_is_reported_with_its_stderr(tmp_path):
    script = tmp_path / "fail.py"
    script.write_text("import sys\nprint('about to fail', file=sys.stderr)\n"
                      "print('disk quota exceeded', file=sys.stderr)\nsys.exit(3)\n")
    path = tmp_path / "prog.yaml"
    path.write_text(f"modules:\n  prog: {{command: [python, '{script}'], size: 2}}\n")
    result = run_diel("run", str(path), n=2, timeout=60)
    assert result.returncode != 0
    assert "exited with status 3" in result.stderr
    assert "last lines of its stderr:" in result.stderr
    assert "disk quota exceeded" in result.stderr


def test_program_timeout_fails_the_job(tmp_path):
    path = tmp_path / "slow.yaml"
    path.write_text("modules:\n  slow: {command: [python, -c, 'import time; time.sleep(30)'], "
                    "timeout: 1}\n")
    started = time.monotonic()
    result = run_diel("run", str(path), n=1, timeout=60)
    assert result.returncode != 0
    assert time.monotonic() - started < 20
    assert "timed out after 1 s" in result.stderr


def test_idle_rank_waiting_for_its_group_uses_almost_no_cpu(tmp_path):
    path = tmp_path / "idle.yaml"
    path.write_text(f"""
modules:
  busy: {{function: '{PROBES}:sleep', settings: {{seconds: 3}}}}
  idle: {{function: '{PROBES}:nothing'}}
groups:
  first: {{modules: [busy]}}
  second: {{modules: [idle], after: [first]}}
""")
    result = run_diel("run", str(path), "--log-level", "debug", n=2, timeout=60)
    assert result.returncode == 0, result.stderr
    match = re.search(r"\[rank 1\] diel.executive DEBUG: waited ([\d.]+) s \(([\d.]+) s CPU\) "
                      r"for group 'second' to start", result.stderr)
    assert match, result.stderr
    waited, cpu = float(match.group(1)), float(match.group(2))
    assert waited >= 2.5
    assert cpu < 0.3
