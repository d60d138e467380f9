"""Objective functions for end-to-end search tests: fast, deterministic trials.

``quick`` scores a trial from its parameters (``x`` and ``y``), optionally sleeps, waits
while a file exists (``hold``: a test keeps a job running that way, whatever the load),
fails or diverges on request (fixed params ``sleep``, ``fail_at``, ``diverge_at``), and appends
every trial it finishes training to the file ``log``, so tests can tell which trials
were trained and how often.
"""

from __future__ import annotations

import json
import math
import os
import time

SEARCHED = ("x", "y")


def quick(trial) -> dict:
    """A made-up but deterministic training of ``epochs`` (default 2) epochs."""
    params = trial.params
    time.sleep(float(params.get("sleep", 0)))
    hold_until = time.monotonic() + 120
    while params.get("hold") and os.path.exists(params["hold"]) and time.monotonic() < hold_until:
        time.sleep(0.05)
    if params.get("x") == params.get("fail_at"):
        raise RuntimeError(f"planted failure at x={params['x']}")
    accuracy = 1.0 - abs(params["x"] - 3) / 10 - abs(params.get("y", 0)) / 100
    if params.get("x") == params.get("diverge_at"):
        accuracy = math.nan
    for epoch in range(1, int(params.get("epochs", 2)) + 1):
        if trial.report(epoch, accuracy=accuracy * epoch / 2, loss=1 - accuracy):
            return {"accuracy": accuracy, "loss": 1 - accuracy}
    searched = {key: params[key] for key in SEARCHED if key in params}
    line = json.dumps({"params": searched, "pid": os.getpid()}, sort_keys=True) + "\n"
    descriptor = os.open(params["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(descriptor, line.encode())
    finally:
        os.close(descriptor)
    return {"accuracy": accuracy, "loss": 1 - accuracy}


def disk_full(ctx) -> None:
    """A module that meets a full disk under its results database."""
    from diel.errors import DatabaseUnwritable
    raise DatabaseUnwritable("the results database /x/wf.db could not be written: disk full (or "
                             "quota exceeded); nothing finished is lost: free space and run the "
                             "same command again to resume")
