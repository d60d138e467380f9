"""Objective functions for the worker tests: each ``mode`` parameter misbehaves its own way."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time


def objective(trial):
    """One report, then what ``trial.params["mode"]`` asks for; ``ok`` succeeds."""
    mode = trial.params["mode"]
    if trial.report(1, accuracy=0.1, loss=2.0):
        return {"accuracy": 0.1}
    if mode == "segfault":
        ctypes.string_at(0)
    elif mode == "abort":
        os.abort()
    elif mode == "killed":   # what the kernel's out-of-memory killer does
        os.kill(os.getpid(), signal.SIGKILL)
    elif mode == "exit":
        os._exit(3)
    elif mode == "sysexit":
        sys.exit(3)
    elif mode == "raise":
        raise ValueError("planted failure")
    elif mode == "nan":
        return float("nan")
    elif mode == "hang":
        print("hanging now", file=sys.stderr, flush=True)
        time.sleep(600)
    elif mode == "number":
        return 0.5
    return {"accuracy": 0.9, "loss": 0.1, "pid": os.getpid()}


def reporting(trial):
    """Reports ``steps`` epochs whose accuracy is ``quality * step``; obeys prune orders."""
    quality = float(trial.params.get("quality", 0.1))
    for step in range(1, int(trial.params.get("steps", 5)) + 1):
        time.sleep(float(trial.params.get("pause", 0.0)))
        if trial.report(step, accuracy=quality * step):
            return {"accuracy": quality * step}
    return {"accuracy": quality * int(trial.params.get("steps", 5))}
