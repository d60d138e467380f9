"""A population-based training member for the PBT tests: a state ``w`` that grows each
epoch by ``1 - |log10(lr) + 2|`` (most at ``lr`` = 0.01), so only a member with a good
learning rate, or one that copied a good member's state, scores well; restored at its
start, checkpointed when ``trial.should_checkpoint`` says so. With a ``log`` param, each
restore and each report is appended to that file as a JSON line (``{"trial", "restored",
"w"}`` and ``{"trial", "epoch", "w", "lr"}``), so a test can tell whose state a member went
on from."""

from __future__ import annotations

import json
import math
import os
import time


def member(trial) -> dict:
    params = trial.params
    saved = trial.restore()
    first, w = (saved[0] + 1, saved[1]["w"]) if saved is not None else (1, 0.0)
    if saved is not None:
        _log(params, {"trial": trial.number, "restored": saved[0], "w": w})
    for epoch in range(first, int(params.get("epochs", 8)) + 1):
        time.sleep(float(params.get("pace", 0.0)))
        w += 1 - abs(math.log10(params["lr"]) + 2)
        _log(params, {"trial": trial.number, "epoch": epoch, "w": w, "lr": params["lr"]})
        stop = trial.report(epoch, accuracy=w)
        if trial.should_checkpoint:
            trial.checkpoint({"w": w})
        if stop:
            break
    return {"accuracy": w}


def _log(params: dict, line: dict) -> None:
    if "log" not in params:
        return
    descriptor = os.open(params["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(descriptor, (json.dumps(line) + "\n").encode())
    finally:
        os.close(descriptor)
