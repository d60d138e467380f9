"""What the worker tests share: workflows of the misbehaving trials in
tests/worker/behaviours.py, their trials in the database, and the processes a trial left."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import diel.results
from tests.helpers.launch import REPO, search_workflow

BEHAVIOURS = REPO / "tests" / "worker" / "behaviours.py"


def workflow(tmp_path: Path, worker: str, space: str, search_extra: str = "",
             size: int = 1, copies: int = 2) -> Path:
    """A workflow beside a copy of behaviours.py: a grid ``space`` served by ``worker``."""
    shutil.copy(BEHAVIOURS, tmp_path / "behaviours.py")
    search = (f"      space: {space}\n      objective: accuracy\n      progress_interval: 3600"
              + (f"\n{search_extra}" if search_extra else ""))
    return search_workflow(tmp_path, search, f"    function: worker\n    size: {size}\n"
                                             f"    copies: {copies}\n    settings: {worker}")


def trials(db: Path) -> list[dict]:
    """Every trial, with its parameters also at the top level of its dict."""
    with diel.results.open(db) as results:
        return [{**row["params"], **row} for row in results.trials()]


def running(pids: list[int]) -> list[int]:
    """Those of ``pids`` still running (a zombie has ended: it only waits to be collected)."""
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def noted(path: Path) -> list[int]:
    """The pids a family wrote: the trial's process first, then the three it started."""
    pids = [int(word) for word in path.read_text().split()]
    assert len(pids) % 4 == 0 and pids, pids
    return pids


def wait_until(condition, seconds: float) -> bool:
    """Whether ``condition()`` came true within ``seconds`` (checked every 50 ms)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True

