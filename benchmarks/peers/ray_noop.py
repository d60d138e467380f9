"""Ray Tune's side of the search benchmark: no-op trials of a random search.

Run by benchmarks/search_bench.py in a fresh process, timed from launch to exit, with the
Python of a separate virtual environment holding Ray Tune (``pip install
'ray[tune]==2.60.0'``; Ray is not a diel dependency)::

    RAY_PYTHON benchmarks/peers/ray_noop.py --trials 500 --workers 4 [--reuse-actors] \\
        --dir DIR --out TIMES.json

One ``Tuner`` run on a local ``ray.init(num_cpus=workers)``, one CPU a trial, at most
``workers`` trials at once; ``num_samples=trials`` of one ``tune.uniform(0, 1)`` parameter
drawn by Ray's default search (random); each trial returns its score and nothing else.
``--reuse-actors`` sets ``TuneConfig(reuse_actors=True)``; without it Ray's default is
kept. Results go to ``--dir`` (Ray's own files: it keeps no database). A driver callback
stamps each trial's completion when Ray's controller learns of it (as diel's master
stamps ``finished_at`` when a result arrives); the stamps go as JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import ray
from ray import tune


class Completions(tune.Callback):
    """The time the controller saw each trial complete."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def on_trial_complete(self, iteration, trials, trial, **info) -> None:
        self.times.append(time.time())


def objective(config: dict) -> dict:
    return {"accuracy": 1 - abs(config["x"] - 0.3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, required=True)
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--reuse-actors", action="store_true")
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    completions = Completions()
    try:
        options = {"reuse_actors": True} if args.reuse_actors else {}
        tuner = tune.Tuner(
            tune.with_resources(objective, {"cpu": 1}),
            param_space={"x": tune.uniform(0, 1)},
            tune_config=tune.TuneConfig(num_samples=args.trials, metric="accuracy", mode="max",
                                        max_concurrent_trials=args.workers, **options),
            run_config=tune.RunConfig(storage_path=str(args.dir.resolve()), name="noop",
                                      verbose=0, callbacks=[completions]))
        tuner.fit()
    finally:
        ray.shutdown()
    args.out.write_text(json.dumps({"completions": completions.times}))


if __name__ == "__main__":
    main()
