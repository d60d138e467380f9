"""Sessions for tests/test_reaper.py to kill: each test here starts one long-lived fixture
process, prints ``HOLDING PGID FOLDER REAPER_PID`` (its process group, the folder it
owns or ``-``, and the reaper's pid) and waits to be killed. Not collected by the suite
(the file name does not start with ``test_``); the outer test runs it by name."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from diel.results import ResultsStore
from tests.helpers import reaper
from tests.helpers.browser import browser_or_skip, chrome, serving
from tests.helpers.dashboard import write_alpha

HOLD_S = 120   # far longer than the outer test takes to kill this session


def hold(pgid: int, folder: Path | str) -> None:
    print(f"HOLDING {pgid} {folder} {reaper._started['reaper'].pid}", flush=True)
    time.sleep(HOLD_S)


@pytest.mark.postgres
def test_hold_postgres(postgres_server) -> None:
    pid = int((postgres_server.folder / "data" / "postmaster.pid").read_text().split()[0])
    hold(os.getpgid(pid), postgres_server.folder)


def dashboard_database(folder: Path) -> Path:
    store = ResultsStore(f"sqlite:///{folder / 'alpha.db'}")
    try:
        write_alpha(store)
    finally:
        store.close()
    return folder / "alpha.db"


def test_hold_dashboard(tmp_path) -> None:
    with serving(dashboard_database(tmp_path)) as served:
        hold(os.getpgid(served.pid), "-")


@pytest.mark.browser
def test_hold_browser() -> None:
    chromium, driver = browser_or_skip()
    browser = chrome(chromium, driver)
    hold(os.getpgid(browser.service.process.pid), "-")
