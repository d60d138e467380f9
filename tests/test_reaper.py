"""A fixture's long-lived process ends with the test session however the session ends:
a pytest run that started it (tests/helpers/session_probe.py) is killed with SIGKILL,
so no teardown runs, and the process's group and folder are gone within seconds
(tests/helpers/reaper.py)."""

from __future__ import annotations

import selectors
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.browser import browser_or_skip
from tests.helpers.launch import REPO
from tests.helpers.postgres import skip_unless_available
from tests.helpers.reaper import ended, group_members

WAIT_S = 20


def held(process: subprocess.Popen) -> tuple[int, str, int]:
    """What the probe session printed on its HOLDING line (its output if it ended first)."""
    seen = []
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while selector.select(120):
            line = process.stdout.readline()
            if not line:
                break
            seen.append(line)
            if line.startswith("HOLDING "):
                _, pgid, folder, reaper = line.split()
                return int(pgid), folder, int(reaper)
    process.kill()
    raise AssertionError("the probe session held nothing:\n" + "".join(seen)[-3000:])


@pytest.mark.slow
@pytest.mark.parametrize("probe", [pytest.param("postgres", marks=pytest.mark.postgres),
                                   "dashboard",
                                   pytest.param("browser", marks=pytest.mark.browser)])
def test_a_killed_session_leaves_nothing_running(probe):
    if probe == "postgres":
        skip_unless_available()
    if probe == "browser":
        browser_or_skip()
    session = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-s", "-n", "0", "-p", "no:cacheprovider",
         f"tests/helpers/session_probe.py::test_hold_{probe}"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        pgid, folder, reaper = held(session)
    finally:
        session.kill()   # SIGKILL: no teardown, no atexit
        session.communicate()
    assert ended(reaper, WAIT_S), "the reaper did not finish"
    assert group_members(pgid) == []
    assert folder == "-" or not Path(folder).exists()
