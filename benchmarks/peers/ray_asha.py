"""Ray Tune's side of the ASHA benchmark: examples/pytorch's search under ``ASHAScheduler``.

Run by benchmarks/asha_bench.py with the Python of a separate virtual environment
holding Ray Tune (``pip install 'ray[tune]==2.60.0' torch==2.13.0 numpy``; Ray is not a
diel dependency), with the repository and examples/pytorch on ``PYTHONPATH``::

    RAY_PYTHON benchmarks/peers/ray_asha.py --points POINTS.json --epochs 4 \\
        --concurrency 2 --grace 1 --eta 2 --dir DIR --out RESULT.json

One ``Tuner`` run on a local ``ray.init(num_cpus=concurrency)``, one CPU a trial, at most
``concurrency`` trials at once; the trials are ``--points`` (the parameter sets of diel's
grid, in diel's order: one ``grid_search`` over their index keeps that order), each
training ``--epochs`` epochs of examples/pytorch/train.py's ``objective`` (the same code
diel runs), whose ``trial`` is a small adapter: its report and the checkpoint after it
(``torch.save`` into a folder) are one ``tune.report``, as Ray's documentation does it.
The scheduler: ``ASHAScheduler(time_attr="training_iteration", max_t=epochs,
grace_period=grace, reduction_factor=eta)``, maximizing ``accuracy``. Writes
``{"best_accuracy": the best final accuracy of the trials that trained every epoch,
"epochs": the epochs all trials trained, "trials": count}`` as JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import ray
import torch
from ray import tune


class RayTrial:
    """What train.py's ``objective`` asks of a diel trial, on Ray Tune."""

    def __init__(self, params: dict[str, Any]) -> None:
        self.params, self.number, self.device = params, 0, None
        self.metrics: dict[str, float] = {}

    def report(self, step: int, **metrics: float) -> bool:
        """Kept for the checkpoint that follows (one ``tune.report`` with both). Ray
        stops a trial ASHA stops itself, so this never says stop."""
        self.metrics = metrics
        return False

    def checkpoint(self, state: Any, step: int | None = None) -> None:
        with tempfile.TemporaryDirectory() as folder:
            torch.save(state, os.path.join(folder, "state.pt"))
            tune.report(self.metrics, checkpoint=tune.Checkpoint.from_directory(folder))

    def restore(self) -> None:
        return None


def trainable(config: dict[str, Any]) -> None:
    from train import objective   # examples/pytorch/train.py, on PYTHONPATH

    objective(RayTrial({**config["points"][config["index"]], "epochs": config["epochs"]}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--points", type=Path, required=True)
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument("--concurrency", type=int, required=True)
    parser.add_argument("--grace", type=int, required=True)
    parser.add_argument("--eta", type=int, required=True)
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    points = json.loads(args.points.read_text())
    ray.init(num_cpus=args.concurrency, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    try:
        scheduler = tune.schedulers.ASHAScheduler(
            time_attr="training_iteration", max_t=args.epochs, grace_period=args.grace,
            reduction_factor=args.eta)
        tuner = tune.Tuner(
            tune.with_resources(trainable, {"cpu": 1}),
            param_space={"index": tune.grid_search(list(range(len(points)))),
                         "points": points, "epochs": args.epochs},
            tune_config=tune.TuneConfig(scheduler=scheduler, metric="accuracy", mode="max",
                                        max_concurrent_trials=args.concurrency),
            run_config=tune.RunConfig(storage_path=str(args.dir.resolve()), name="asha",
                                      verbose=0))
        results = tuner.fit()
    finally:
        ray.shutdown()
    finals = [r.metrics for r in results if r.metrics]
    complete = [m["accuracy"] for m in finals if m["training_iteration"] == args.epochs]
    args.out.write_text(json.dumps({
        "best_accuracy": max(complete, default=None),
        "epochs": sum(m["training_iteration"] for m in finals), "trials": len(finals)}))


if __name__ == "__main__":
    main()
