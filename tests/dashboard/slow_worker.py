"""The objective of the browser test's search: slow enough to watch, and held on a file.

``slow`` trains for three "epochs" of ``sleep / 3`` seconds each, reporting accuracy and
loss after each, and returns them. Trials numbered ``hold_from`` or more first wait while
the file ``hold`` exists (at most 120 s, so a test that dies never leaves a job hung):
the test lets the first trials finish, looks at the page, then removes the file and
watches the rest arrive.
"""

from __future__ import annotations

import os
import time


def slow(trial) -> dict:
    params = trial.params
    give_up = time.monotonic() + 120
    while trial.number >= params["hold_from"] and os.path.exists(params["hold"]) \
            and time.monotonic() < give_up:
        time.sleep(0.05)
    accuracy = 1.0 - abs(params["x"] - 0.5) - (0.1 if params["act"] == "tanh" else 0.0)
    for epoch in (1, 2, 3):
        time.sleep(params["sleep"] / 3)
        trial.report(epoch, accuracy=accuracy * epoch / 3, loss=1.0 - accuracy * epoch / 3)
    return {"accuracy": accuracy, "loss": 1.0 - accuracy}
