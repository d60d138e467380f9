"""A trial function that keeps its progress, for the end-to-end tests of checkpoints:
``epochs`` epochs (default 6) of ``pace`` seconds each, resumed from its checkpoint,
checkpointed after each report, stopping when the report says so; every epoch it trains
is appended to the file ``log`` as ``{"x": ..., "epoch": ...}``, so a test can tell
whether an epoch was trained twice."""

from __future__ import annotations

import json
import os
import time


def resumable(trial) -> dict:
    params = trial.params
    saved = trial.restore()
    first = saved[0] + 1 if saved is not None else 1
    accuracy = saved[1]["accuracy"] if saved is not None else 0.0
    for epoch in range(first, int(params.get("epochs", 6)) + 1):
        time.sleep(float(params.get("pace", 0.2)))
        accuracy = params["x"] / 10 + epoch / 100
        line = json.dumps({"x": params["x"], "epoch": epoch}) + "\n"
        descriptor = os.open(params["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(descriptor, line.encode())
        finally:
            os.close(descriptor)
        stop = trial.report(epoch, accuracy=accuracy)
        trial.checkpoint({"epoch": epoch, "accuracy": accuracy})
        if stop:
            break
    return {"accuracy": accuracy}
