"""The end of a job: the tuple space stops as soon as every group has finished."""

from __future__ import annotations

import time

import pytest

from tests.helpers.launch import run_diel

pytestmark = pytest.mark.mpi

LOOK_EVERY = 60   # seconds between the server's own looks at ctx.stop_requested()


def test_the_tuple_space_stops_when_the_last_group_finishes_not_at_its_next_look(tmp_path):
    """The lowest rank of a group tells the servers (a SHUTDOWN) once every group has
    finished; the job would otherwise last until the server's next look, a minute here."""
    path = tmp_path / "end.yaml"
    path.write_text(f"""
modules:
  space: {{function: tuplespace, settings: {{stop_check_interval: {LOOK_EVERY}}}}}
  first: {{function: 'tests.executive.probes:nothing'}}
  second: {{function: 'tests.executive.probes:nothing'}}
groups:
  one: {{modules: [first]}}
  two: {{modules: [second], after: [one]}}
services: [space]
""")
    started = time.monotonic()
    result = run_diel("run", str(path), n=3, timeout=LOOK_EVERY + 30)
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < LOOK_EVERY / 2
