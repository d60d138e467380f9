"""Objective functions for benchmarks/search_bench.py: trials that do nothing, or sleep."""

import time


def sleeper(trial) -> dict:
    """Sleep ``sleep`` seconds (a fixed param), then score ``x``."""
    pause = float(trial.params.get("sleep", 0.0))
    if pause:
        time.sleep(pause)
    x = trial.params["x"]
    return {"accuracy": 1 - abs(x - 0.3), "loss": abs(x - 0.3)}
