"""A population-based training study in the dashboard as a person sees it (headless
Chromium, as tests/dashboard/test_browser.py drives it, on a database written straight
through the store: no search runs): the lineage tab draws the family tree, and a
member's panel lists its segments, each with the parameters that changed and its
parent.

Skipped, with the reason, where selenium, chromium or chromedriver is missing; with
``DIEL_TEST_BROWSER=required`` that is a failure instead.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.helpers.browser import browser_or_skip, chrome, serving
from tests.helpers.populations import fill_population

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _wait_for(what: str, check, timeout: float = 60):
    """Poll ``check()`` until it returns something true; fail naming ``what``."""
    give_up = time.monotonic() + timeout
    while not (found := check()):
        if time.monotonic() > give_up:
            raise AssertionError(f"waited {timeout} s for {what}")
        time.sleep(0.2)
    return found


def test_the_lineage_tab_and_a_members_segments_in_chromium(tmp_path):
    chromium, chromedriver = browser_or_skip()
    db = tmp_path / "pbt.db"
    with ThreadPoolExecutor(1) as pool:   # the browser starts while the dashboard does
        starting = pool.submit(chrome, chromium, chromedriver)
        try:
            fill_population(f"sqlite:///{db}")
            with serving(db) as served:
                driver = starting.result()
                look_at_the_lineage(driver, served.url)
        finally:
            if starting.exception() is None:   # else its error is the one raised above
                starting.result().quit()


def look_at_the_lineage(driver, url: str) -> None:
    """Open ``url`` at the PBT study's lineage tab, trial 3, in ``driver``; check what
    it draws."""
    driver.get(f"{url}#study=pbt&kind=lineage&trial=3")
    _wait_for("the lineage tab", lambda: driver.find_elements(
        "css selector", '#kinds button[data-kind="lineage"].on'))
    title = _wait_for("the family tree", lambda: driver.execute_script(
        "const t = document.querySelector('#plot .gtitle'); return t && t.textContent"))
    assert "lineage of 5 members, 3 exploits" in title
    rows = _wait_for("the member's segments", lambda: driver.execute_script(
        "return [...document.querySelectorAll('#trial details.lineage tbody tr')]"
        ".map(tr => [...tr.cells].map(td => td.textContent))"))
    assert rows == [["0", "4", "", "lr=0.025, momentum=0.9"],
                    ["4", "8", "trial 1 step 4", "lr=0.012"],
                    ["8", "12", "trial 0 step 8", "lr=0.03"]]
    errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == []
