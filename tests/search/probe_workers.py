"""Worker modules for end-to-end search tests: fast, deterministic trials.

``quick`` scores a trial from its parameters (``x`` and ``y``), optionally sleeps, fails
or diverges on request, and appends every trial it finishes training to a log file, so
tests can tell which trials were trained and how often.
"""

from __future__ import annotations

import json
import math
import os
import time

from trainer.worker import serve_tasks


def quick(ctx) -> None:
    """Serve the search's tasks with a made-up but deterministic training."""
    settings = ctx.config
    log_path = settings["log"]

    def run_trial(params, report_epoch):
        time.sleep(float(settings.get("sleep", 0)))
        if params.get("x") == settings.get("fail_at"):
            raise RuntimeError(f"planted failure at x={params['x']}")
        accuracy = 1.0 - abs(params["x"] - 3) / 10 - abs(params.get("y", 0)) / 100
        if params.get("x") == settings.get("diverge_at"):
            accuracy = math.nan
        for epoch in range(1, int(settings.get("epochs", 2)) + 1):
            if report_epoch(epoch, {"accuracy": accuracy * epoch / 2, "loss": 1 - accuracy}):
                return {"accuracy": accuracy, "loss": 1 - accuracy}
        line = json.dumps({"params": params, "pid": os.getpid()}, sort_keys=True) + "\n"
        descriptor = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(descriptor, line.encode())
        finally:
            os.close(descriptor)
        return {"accuracy": accuracy, "loss": 1 - accuracy}

    serve_tasks(ctx.space, settings.get("study") or ctx.workflow_name, ctx.copy, run_trial)
