"""Helpers shared by the dashboard's tests and benchmarks/dashboard_bench.py: a real
``diel dashboard`` process, and headless Chromium driven by Selenium.

:func:`serving` starts ``diel dashboard DB --port 0`` and yields the address it prints
(its token included: the address a person opens) and its pid; it stops it with Ctrl-C
(SIGINT) and checks that it ended cleanly. :func:`find_browser`
finds Debian's ``chromium`` and ``chromedriver`` (or says what is missing) and
:func:`chrome` starts a headless browser whose console is logged. The dashboard and the
browser end with this process however it ends (tests/helpers/reaper.py).
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, NamedTuple
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.helpers.launch import REPO
from tests.helpers.markers import require
from tests.helpers.reaper import forget, reap_at_exit


def find_browser() -> tuple[str | None, str | None, list[str]]:
    """The paths of chromium and chromedriver (None where missing) and what is missing,
    each with how to install it. A test that looks for a browser is marked ``browser``."""
    require("browser", "looks for Chromium")
    missing = []
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium is not installed (pip install -e '.[test]')")
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None:
        missing.append("no chromium on PATH (Debian: apt-get install chromium chromium-driver)")
    if driver is None:
        missing.append("no chromedriver on PATH (Debian: apt-get install chromium-driver)")
    return chromium, driver, missing


def browser_or_skip() -> tuple[str, str]:
    """The paths of chromium and chromedriver; a skip (a failure when the environment
    requires the browser test) naming what is missing."""
    chromium, driver, missing = find_browser()
    if missing:
        reason = "the browser test needs " + "; ".join(missing)
        if os.environ.get("DIEL_TEST_BROWSER") == "required":
            pytest.fail(f"DIEL_TEST_BROWSER=required but {reason}")
        pytest.skip(reason)
    return chromium, driver   # type: ignore[return-value]


def chrome(chromium: str, driver: str, width: int = 1400, height: int = 1250) -> Any:
    """A headless Chromium (a fresh profile) driven through ``driver``, its console kept
    for ``get_log("browser")``."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     f"--window-size={width},{height}"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # chromedriver leads a process group of its own, which its browser joins: the reaper
    # kills the group if this process ends without quitting the driver.
    service = Service(driver, popen_kw={"start_new_session": True})
    browser = webdriver.Chrome(options=options, service=service)
    group = f"group {service.process.pid}"
    reap_at_exit(group)
    quit_driver = browser.quit

    def quit_and_forget() -> None:
        try:
            quit_driver()
        finally:
            forget(group)

    browser.quit = quit_and_forget
    return browser


def _first_line(process: subprocess.Popen, timeout: float) -> str:
    """The first line ``process`` prints on stdout, waiting at most ``timeout`` s."""
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        if not selector.select(timeout):
            process.kill()
            raise AssertionError(f"diel dashboard printed nothing in {timeout} s")
    return process.stdout.readline()


class Served(NamedTuple):
    """A running ``diel dashboard``: the address it printed (``http://HOST:PORT/?token=
    ...``, the token left out with ``--no-token``) and its process id."""

    url: str
    pid: int

    @property
    def base(self) -> str:
        """The address without the token: ``http://HOST:PORT/``."""
        return self.url.split("?", 1)[0]

    @property
    def token(self) -> str | None:
        return parse_qs(urlsplit(self.url).query).get("token", [None])[0]

    def json(self, path: str, timeout: float = 60) -> Any:
        """The JSON answer of endpoint ``path`` (``api/...``), asked as a script asks:
        the token in an ``Authorization: Bearer`` header."""
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        request = urllib.request.Request(self.base + path, headers=headers)
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return json.load(answer)


@contextmanager
def serving(db: str | Path, *args: str, timeout: float = 60) -> Iterator[Served]:
    """Run ``diel dashboard db --port 0 args`` and yield its address and process id; on
    leaving, stop it with SIGINT and check it exited 0 (AssertionError otherwise)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "diel", "dashboard", str(db), "--port", "0", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(REPO),
        env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True)
    group = f"group {process.pid}"
    reap_at_exit(group)   # should this process end first
    try:
        line = _first_line(process, timeout)
        assert "http://" in line, line + process.stderr.read()
        yield Served(line.split(" at ", 1)[1].split()[0], process.pid)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
        try:
            _, err = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise AssertionError("diel dashboard did not stop on SIGINT within 30 s") from None
        finally:
            forget(group)
    assert process.returncode == 0, err
