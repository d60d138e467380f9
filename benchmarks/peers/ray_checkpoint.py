"""Ray Tune's side of the checkpoint benchmark: save a checkpoint in a trial, restore it
in the resumed trial.

Run by benchmarks/checkpoint_bench.py with the Python of a separate virtual environment
holding Ray Tune (``pip install 'ray[tune]==2.60.0' torch==2.13.0 numpy``; Ray is not a
diel dependency)::

    RAY_PYTHON benchmarks/peers/ray_checkpoint.py --sizes 1 10 100 --dir DIR --out TIMES.json

One ``Tuner`` run on a local ``ray.init``, one trial per size (``--sizes``, MiB), one trial
at a time; storage (``RunConfig.storage_path``) in ``DIR``. Each trial builds the state of
its size (benchmarks/checkpoint_state.py) and saves it as Ray Tune's documentation does:
``torch.save`` into a temporary folder, then ``tune.report(metrics,
checkpoint=Checkpoint.from_directory(folder))``, which returns once Ray has copied the
folder into the trial's storage. It does so twice (the first warms up) and times the
second, from ``torch.save`` to the return of ``report``. Then the trial raises; Ray Tune
restarts it (``FailureConfig(max_failures=1)``) from that checkpoint, and the resumed
trial times its restore: ``tune.get_checkpoint()``, ``as_directory()`` (the storage
folder itself on a local file system, no copy) and ``torch.load`` of the state; then
reads every byte of its tensors once (``checkpoint_state.touch``, as diel's side does:
ready to train). Writes ``{"report": {mib: s}, "restore": {mib: s}, "restore touched":
{mib: s}}`` as JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import ray
import torch
from ray import tune

BENCHMARKS = str(Path(__file__).resolve().parent.parent)
sys.path.insert(0, BENCHMARKS)
from checkpoint_state import make_state, touch  # noqa: E402

FILE = "state.pt"


def record(out: str, what: str, mib: int, seconds: float) -> None:
    """Append one timing to the trial's side file (trials run in Ray's worker processes)."""
    with open(out, "a") as f:
        f.write(json.dumps({"what": what, "mib": mib, "s": seconds}) + "\n")


def trainable(config: dict) -> None:
    mib, out = config["mib"], config["out"]
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:   # the resumed attempt: time the restore
        started = time.perf_counter()
        with checkpoint.as_directory() as folder:
            state = torch.load(os.path.join(folder, FILE))
        loaded = time.perf_counter() - started
        touch(state)
        touched = time.perf_counter() - started
        record(out, "restore", mib, loaded)
        record(out, "restore touched", mib, touched)
        tune.report({"restored": len(state["model"])})
        return
    state = make_state(mib)
    for step in range(2):   # the first one warms up
        with tempfile.TemporaryDirectory(dir=config["scratch"]) as folder:
            started = time.perf_counter()
            torch.save(state, os.path.join(folder, FILE))
            tune.report({"step": step}, checkpoint=tune.Checkpoint.from_directory(folder))
            seconds = time.perf_counter() - started
    record(out, "report", mib, seconds)
    raise RuntimeError("checkpoint benchmark: the planned crash, to be restored")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", required=True, help="state sizes in MiB")
    parser.add_argument("--dir", type=Path, required=True, help="storage folder (the disk measured)")
    parser.add_argument("--out", type=Path, required=True, help="JSON file for the timings")
    args = parser.parse_args()
    folder = args.dir.resolve()
    side = folder / "timings.jsonl"
    scratch = folder / "scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    # Ray's worker processes find checkpoint_state through the environment they inherit
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [BENCHMARKS, os.environ.get("PYTHONPATH")]))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        tuner = tune.Tuner(
            trainable,
            param_space={"mib": tune.grid_search(args.sizes), "out": str(side),
                         "scratch": str(scratch)},
            tune_config=tune.TuneConfig(max_concurrent_trials=1),
            run_config=tune.RunConfig(storage_path=str(folder / "storage"), name="bench",
                                      failure_config=tune.FailureConfig(max_failures=1),
                                      verbose=0))
        results = tuner.fit()
    finally:
        ray.shutdown()
    errors = [str(r.error) for r in results if r.error is not None]
    if errors:
        raise SystemExit(f"ray_checkpoint: a trial failed: {errors[0]}")
    timings: dict[str, dict[int, float]] = {"report": {}, "restore": {}, "restore touched": {}}
    for line in side.read_text().splitlines():
        row = json.loads(line)
        timings[row["what"]][row["mib"]] = row["s"]
    args.out.write_text(json.dumps(timings))


if __name__ == "__main__":
    main()
