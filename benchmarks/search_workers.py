"""Worker modules for benchmarks/search_bench.py: trials that do nothing, or sleep."""

import time

from trainer.worker import serve_tasks


def sleeper(ctx) -> None:
    """Serve the search's tasks; each trial sleeps ``settings.sleep`` seconds."""
    pause = float(ctx.config.get("sleep", 0.0))

    def run_trial(params, report_epoch):
        if pause:
            time.sleep(pause)
        return {"accuracy": 1 - abs(params["x"] - 0.3), "loss": abs(params["x"] - 0.3)}

    serve_tasks(ctx.space, ctx.workflow_name, ctx.copy, run_trial)
