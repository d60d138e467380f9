"""A fixture's long-lived process ends with the test session however the session ends:
a pytest run that started them (tests/helpers/session_probe.py) is killed with SIGKILL,
so no teardown runs, and each process's group and folder are gone within seconds
(tests/helpers/reaper.py). One such run holds every probe the selected tests ask for
(one pytest started, not one a probe); each probe is checked by its own test."""

from __future__ import annotations

import os
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
PROBES = ("postgres", "dashboard", "browser")

# One worker runs these tests, so that they share the one killed session.
pytestmark = pytest.mark.xdist_group("reaper")


def held(process: subprocess.Popen, timeout: float = 120) -> dict[str, tuple[int, str, int]]:
    """What the probe session printed on its HOLDING lines, by probe, once it says HELD
    (an error with its output if it ends or falls silent first). Read straight from the
    pipe: a buffered readline may take in more lines than it returns, and the pipe then
    looks idle while HELD waits in the buffer."""
    output = b""
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while b"HELD\n" not in output and selector.select(timeout):
            chunk = os.read(process.stdout.fileno(), 65536)
            if not chunk:
                break
            output += chunk
    text = output.decode(errors="replace")
    if "HELD\n" not in text:
        process.kill()
        raise AssertionError("the probe session held nothing:\n" + text[-3000:])
    found = {}
    for line in text.splitlines():
        if line.startswith("HOLDING "):
            _, probe, pgid, folder, reaper = line.split()
            found[probe] = (int(pgid), folder, int(reaper))
    return found


@pytest.fixture(scope="module")
def killed_session(request: pytest.FixtureRequest) -> dict[str, tuple[int, str, int]]:
    """Run one probe session holding the probes of this module's selected tests, SIGKILL
    it once it holds them, and answer what it held, by probe."""
    probes = sorted({item.callspec.params["probe"] for item in request.session.items
                     if item.module is request.module}, key=PROBES.index)
    session = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-s", "-n", "0", "-p", "no:cacheprovider",
         "tests/helpers/session_probe.py::test_hold"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "DIEL_PROBES": ",".join(probes)})
    try:
        return held(session)
    finally:
        session.kill()   # SIGKILL: no teardown, no atexit
        session.communicate()


@pytest.mark.slow
@pytest.mark.parametrize("probe", [pytest.param("postgres", marks=pytest.mark.postgres),
                                   "dashboard",
                                   pytest.param("browser", marks=pytest.mark.browser)])
def test_a_killed_session_leaves_nothing_running(probe, request):
    if probe == "postgres":
        skip_unless_available()
    if probe == "browser":
        browser_or_skip()
    session = request.getfixturevalue("killed_session")
    assert probe in session, f"the probe session did not hold {probe}: {session}"
    pgid, folder, reaper = session[probe]
    assert ended(reaper, WAIT_S), "the reaper did not finish"
    assert group_members(pgid) == []
    assert folder == "-" or not Path(folder).exists()
