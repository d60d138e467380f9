"""The dashboard as a person uses it: headless Chromium (Debian's ``chromium`` and
``chromedriver``, driven by Selenium) on ``diel dashboard`` following a real search
that ``mpiexec`` is still running.

The browser logs in as a person does, through the address ``diel dashboard`` printed
(its token becomes a cookie and leaves the address). The search's trials from number 8
on wait while a hold file exists, so the test looks at a page whose database holds
still, then lets the search go on and watches the new trials arrive without a reload.
It checks the trial table against the database, that the history plot draws one point
a finished trial (at the end, after a click on its tab), a trial's per-epoch curves on
click, filters typed in the filter box (a quoted value holding a comma is one filter),
that the browser's console logged no error, and that without the cookie the open page
says it is refused and a new one is; it saves a screenshot to
``$DIEL_TEST_ARTIFACTS`` (default: ``test-artifacts/`` in the repository, git-ignored).

Skipped, with the reason, where selenium, chromium or chromedriver is missing; with
``DIEL_TEST_BROWSER=required`` (what CI sets, .ci/run) that is a failure instead.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import diel.results
from diel.errors import ResultsError
from tests.helpers.browser import browser_or_skip, chrome, serving
from tests.helpers.launch import REPO, find_mpiexec, search_workflow

pytestmark = [pytest.mark.mpi, pytest.mark.browser, pytest.mark.slow]

TRIALS = 24
HOLD_FROM = 8
COPIES = 2
WAIT_S = 90


def artifacts() -> Path:
    """Where the test saves its screenshot (created if need be)."""
    folder = Path(os.environ.get("DIEL_TEST_ARTIFACTS") or REPO / "test-artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _start_search(folder: Path, hold: Path) -> subprocess.Popen:
    """``mpiexec -n 4 diel run`` of a random search of TRIALS slow trials on COPIES worker
    copies (tests/dashboard/slow_worker.py), its output in files beside the workflow."""
    path = search_workflow(folder, f"""\
      strategy: random
      seed: 5
      max_trials: {TRIALS}
      progress_interval: 3600
      space:
        x: {{uniform: [0, 1]}}
        act: {{choice: [relu, tanh]}}""", f"""\
    function: worker
    copies: {COPIES}
    settings:
      run: tests.dashboard.slow_worker:slow
      params: {{sleep: 0.3, hold_from: {HOLD_FROM}, hold: '{hold}'}}""")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    with open(folder / "search.out", "w") as out, open(folder / "search.err", "w") as err:
        return subprocess.Popen([find_mpiexec(), "-n", str(COPIES + 2), sys.executable, "-m",
                                 "diel", "run", str(path)], cwd=str(REPO), env=env,
                                stdout=out, stderr=err)


def _wait_for(what: str, check, timeout: float = WAIT_S, every: float = 0.2):
    """Poll ``check()`` every ``every`` s until it returns something true; fail naming
    ``what`` after ``timeout`` s."""
    give_up = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > give_up:
            raise AssertionError(f"waited {timeout} s for {what}")
        time.sleep(every)


def _trials(db: Path) -> list[dict] | None:
    """The trials in ``db`` (best first, as the table's default order), or None while
    the search has not created its tables yet."""
    if not db.exists():
        return None
    try:
        with diel.results.open(db) as results:
            return results.trials()
    except ResultsError:
        return None


def _rows(driver) -> list[tuple[int, str]]:
    """The table's rows as (number, status), top to bottom."""
    return [tuple(row) for row in driver.execute_script(
        "return [...document.querySelectorAll('#trials tbody tr')]"
        ".map(tr => [Number(tr.dataset.number), tr.dataset.status])")]


def _filter(driver, text: str) -> None:
    """Type ``text`` in the filter box and submit it."""
    box = driver.find_element("id", "where")
    box.clear()
    box.send_keys(text)
    driver.find_element("css selector", "#filters button[type=submit]").click()


def _points(driver, plot: str) -> int:
    return driver.execute_script(
        f"return document.querySelectorAll('{plot} .main-svg path.point').length")


def test_the_dashboard_follows_a_running_search_in_chromium(tmp_path):
    chromium, chromedriver = browser_or_skip()
    db, hold = tmp_path / "wf.db", tmp_path / "hold"
    hold.touch()
    search = _start_search(tmp_path, hold)
    driver = None
    try:
        held = _wait_for("the first trials to finish and the held ones to start", lambda: (
            rows := _trials(db)) and sum(r["status"] == "ok" for r in rows) == HOLD_FROM
            and any(r["status"] == "running" for r in rows) and rows)
        study = held[0]["study"]
        with serving(db) as served:
            assert "?token=" in served.url
            driver = chrome(chromium, chromedriver)
            driver.get(f"{served.url}#study={study}")   # logs in: the cookie, then the page
            _wait_for("the page, its token gone from the address", lambda: driver.current_url
                      == f"{served.base}#study={study}", timeout=30)
            expected = [(r["number"], r["status"]) for r in _trials(db)]
            assert expected == [(r["number"], r["status"]) for r in held]   # held still
            _wait_for("the trial table", lambda: _rows(driver) == expected, timeout=60)
            _wait_for("the history plot", lambda: _points(driver, "#plot") == HOLD_FROM,
                      timeout=60)
            driver.execute_script("window.dielNotReloaded = true")

            hold.unlink()   # the search goes on; the page must show it without a reload
            _wait_for("a trial finished after the page was drawn", lambda: any(
                number >= HOLD_FROM and status == "ok" for number, status in _rows(driver)))
            assert search.wait(timeout=WAIT_S) == 0, (tmp_path / "search.err").read_text()
            final = [(r["number"], r["status"]) for r in _trials(db)]
            assert len(final) == TRIALS and {status for _, status in final} == {"ok"}
            _wait_for("the finished search's table", lambda: _rows(driver) == final)
            # the page redraws a plot of a changing study at a pace set by its cost (at
            # most every 40 times it); a click on its tab redraws it at once
            driver.find_element("css selector", '#kinds button[data-kind="history"]').click()
            _wait_for("the finished search's plot", lambda: _points(driver, "#plot") == TRIALS)
            assert driver.execute_script("return window.dielNotReloaded") is True

            number = final[0][0]
            epochs = served.json(f"api/trial?study={study}&number={number}")["epochs"]
            values = sum(isinstance(v, float) for e in epochs for v in e["metrics"].values())
            assert len(epochs) == 3 and values >= 6   # accuracy and loss (and more) per epoch
            driver.find_element("css selector", f'#trials tbody tr[data-number="{number}"]').click()
            _wait_for("the trial's per-epoch curves",
                      lambda: _points(driver, "#trial-plot") == values, timeout=60)
            assert driver.find_element("css selector", "#trial h2").text.startswith(
                f"Trial {number}")
            driver.execute_script("window.scrollTo(0, 0)")
            driver.save_screenshot(str(artifacts() / "dashboard.png"))
            errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
            assert errors == []

            relu = [(r["number"], r["status"]) for r in _trials(db) if r["params"]["act"] == "relu"]
            _filter(driver, "act = 'relu', x>=0")
            _wait_for("the filtered table", lambda: _rows(driver) == relu and relu)
            _filter(driver, 'act="relu,tanh"')   # one filter: no act is that
            _wait_for("a filter that matches nothing", lambda: driver.find_element(
                "id", "range").text == "no trials match" and not _rows(driver))
            assert not driver.find_element("id", "table-message").is_displayed()
            _filter(driver, "act=3")
            _wait_for("the filter's error", lambda: "act holds only strings" in
                      driver.find_element("id", "table-message").text)

            driver.delete_all_cookies()   # as after a restart with another token
            _wait_for("the open page to say it is refused", lambda: "needs its token" in
                      driver.find_element("id", "problem").text)
            driver.get(served.base)   # Chrome may show the text/plain answer a moment later
            _wait_for("the refused address's sentence", lambda: "needs its token" in
                      driver.find_element("tag name", "body").text)
            assert study not in driver.page_source
    finally:
        if driver is not None:
            driver.quit()
        if search.poll() is None:
            hold.unlink(missing_ok=True)
            search.kill()
            search.wait(timeout=30)
