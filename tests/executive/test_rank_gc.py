"""``diel run`` keeps Python's garbage collector off while a rank starts (diel.cli.cmd_run):
the modules run with it on again, the start's objects frozen out of its scans."""

from __future__ import annotations

import json

import pytest

from tests.helpers.launch import run_diel

pytestmark = pytest.mark.mpi

WORKFLOW = """
modules:
  space: {function: tuplespace}
  probe: {function: 'tests.executive.probes:record_gc', copies: 2, settings: {out: '%s'}}
services: [space]
"""


def test_modules_run_with_the_collector_on_and_the_start_frozen(tmp_path):
    (tmp_path / "wf.yaml").write_text(WORKFLOW % tmp_path)
    ran = run_diel("run", str(tmp_path / "wf.yaml"), n=3, timeout=90)
    assert ran.returncode == 0, ran.stderr[-3000:]
    states = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (1, 2)]
    for state in states:
        assert state["enabled"]
        assert state["frozen"] > 10_000   # diel's, mpi4py's and the standard library's
