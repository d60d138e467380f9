"""A session for tests/test_reaper.py to kill: its one test starts each long-lived fixture
process that ``DIEL_PROBES`` names (comma-separated: ``postgres``, ``dashboard``,
``browser``) and this machine has, prints ``HOLDING PROBE PGID FOLDER REAPER_PID`` for each
(its process group, the folder it owns or ``-``, and the reaper's pid), then ``HELD``, and
waits to be killed. One session holds them all, so that the outer test starts one pytest,
not one a probe. Not collected by the suite (the file name does not start with
``test_``); the outer test runs it by name."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import pytest

from diel.results import ResultsStore
from tests.helpers import reaper
from tests.helpers.browser import chrome, find_browser, serving
from tests.helpers.dashboard import write_alpha
from tests.helpers.postgres import unavailable

HOLD_S = 120   # far longer than the outer test takes to kill this session


def dashboard_database(folder: Path) -> Path:
    store = ResultsStore(f"sqlite:///{folder / 'alpha.db'}")
    try:
        write_alpha(store)
    finally:
        store.close()
    return folder / "alpha.db"


def hold_postgres(request: pytest.FixtureRequest, stack: contextlib.ExitStack,
                  folder: Path) -> tuple[int, Path | str] | None:
    if unavailable() is not None:
        return None
    server = request.getfixturevalue("postgres_server")
    pid = int((server.folder / "data" / "postmaster.pid").read_text().split()[0])
    return os.getpgid(pid), server.folder


def hold_dashboard(request: pytest.FixtureRequest, stack: contextlib.ExitStack,
                   folder: Path) -> tuple[int, Path | str] | None:
    served = stack.enter_context(serving(dashboard_database(folder)))
    return os.getpgid(served.pid), "-"


def hold_browser(request: pytest.FixtureRequest, stack: contextlib.ExitStack,
                 folder: Path) -> tuple[int, Path | str] | None:
    chromium, driver, missing = find_browser()
    if missing:
        return None
    browser = chrome(chromium, driver)
    return os.getpgid(browser.service.process.pid), "-"


HOLDERS = {"postgres": hold_postgres, "dashboard": hold_dashboard, "browser": hold_browser}


@pytest.mark.postgres
@pytest.mark.browser
def test_hold(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    with contextlib.ExitStack() as stack:
        for probe in os.environ["DIEL_PROBES"].split(","):
            held = HOLDERS[probe](request, stack, tmp_path)
            if held is not None:
                print(f"HOLDING {probe} {held[0]} {held[1]} {reaper._started['reaper'].pid}",
                      flush=True)
        print("HELD", flush=True)
        time.sleep(HOLD_S)
