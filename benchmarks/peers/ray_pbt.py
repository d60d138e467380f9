"""Ray Tune's side of the PBT benchmark: one search with ``PopulationBasedTraining``.

Run by benchmarks/pbt_bench.py with the Python of a separate virtual environment holding
Ray Tune (``pip install 'ray[tune]==2.60.0' torch==2.13.0 numpy``; Ray is not a diel
dependency), once per problem and seed::

    RAY_PYTHON benchmarks/peers/ray_pbt.py --problem toy --seed 0 --population 8 \\
        --interval 4 --steps 100 --step-seconds 0.05 --reports REPORTS --dir DIR \
        --out RESULT.json

One ``Tuner`` run on a local ``ray.init`` with one CPU per member (all members train at
once, as diel's population does), the scheduler ``PopulationBasedTraining(time_attr=
"training_iteration", perturbation_interval=interval, quantile_fraction=0.25,
resample_probability=0.25, perturbation_factors=(1.2, 0.8), synch=False)`` (Ray's
defaults but the interval) and the same space as diel's: the initial members drawn from
it, a resampled value drawn from it, a perturbed value clipped to its bounds (a
``custom_explore_fn``: Ray does not clip, diel does). The problems:

* ``toy``: benchmarks/pbt_functions.py's port of Ray's pbt_function example, ``lr`` in
  uniform(0.0001, 0.02), checkpointing every ``interval`` steps as the example does, a
  step taking ``--step-seconds`` (a sleep, as diel's member: pbt_functions' docstring);
* ``mlp``: examples/pbt/train.py's network (the trainer's MLP on the shipped MNIST subset),
  ``learning_rate`` log-uniform and ``momentum`` uniform (benchmarks/pbt_bench.py's
  bounds, passed as ``--bounds``), a checkpoint after every epoch (pickled into a folder
  given to ``tune.report``), the same data order per epoch as the diel member;
* ``state``: the whole-exploit timing's member (``state_trainable``): a ``--mib`` MiB state
  saved with ``torch.save`` every interval and restored with ``torch.load``, score ``x``
  uniform in [0, 1], the times of its reports and restores logged to ``--log``.

Each member trains ``--steps`` steps (epochs) from the start of its life and returns
(Ray stops it there: its scheduler never ranks that last result, as diel's pbt with
``max_epochs``). Every report of the toy and MLP members, those an exploit's restore
supersedes included, appends to the report file ``--reports``
(pbt_functions.note_report, as diel's members do). Writes ``{"score": best final
accuracy, "epochs": the reports counted, "fit_seconds": Tuner.fit's time, "exploits":
Ray's count of perturbations}`` as JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import ray
from ray import tune
from ray.tune.schedulers import PopulationBasedTraining

REPO = Path(__file__).resolve().parent.parent.parent
PATHS = [str(REPO / "benchmarks"), str(REPO / "examples" / "pbt"), str(REPO)]
sys.path[:0] = PATHS
from pbt_functions import (LR_BOUNDS, STEP_SECONDS, count_reports, log_event,  # noqa: E402
                           note_report, toy_step)

STATE = "state.pkl"


def restored() -> tuple[int, object] | None:
    """``(step, state)`` of the checkpoint Ray restored this trial from, or None."""
    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        return None
    with checkpoint.as_directory() as folder:
        with open(os.path.join(folder, STATE), "rb") as f:
            return pickle.load(f)


def report(metrics: dict, step: int, state: object | None, reports: str) -> None:
    """``tune.report`` the metrics, with a checkpoint of ``(step, state)`` when given,
    counted in the report file ``reports`` first."""
    note_report(reports)
    if state is None:
        tune.report(metrics)
        return
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, STATE), "wb") as f:
            pickle.dump((step, state), f, protocol=5)
        tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(folder))


def toy_trainable(config: dict) -> None:
    lr, steps, every = config["lr"], config["steps"], config["checkpoint_interval"]
    accuracy, first = 0.0, 1
    if (saved := restored()) is not None:
        step, state = saved
        accuracy, first = state["accuracy"], step + 1
    rng = np.random.default_rng()
    for step in range(first, steps + 1):
        time.sleep(config["step_seconds"])
        accuracy = toy_step(accuracy, lr, rng)
        report({"accuracy": accuracy, "step": step}, step,
               {"accuracy": accuracy} if step % every == 0 else None, config["reports"])


def mlp_trainable(config: dict) -> None:
    import train   # examples/pbt/train.py: the same network, state and data order as diel's member

    params = {key: config[key] for key in ("learning_rate", "momentum", "batch_size", "hidden", "seed")}
    x_train, y_train, x_val, y_val = train.mnist()
    model = train.build(params)
    first = 1
    if (saved := restored()) is not None:
        step, state = saved
        train.load_state(model, state)
        first = step + 1
    for epoch in range(first, config["steps"] + 1):
        order = np.random.default_rng([params["seed"], epoch]).permutation(len(x_train))
        model.fit(x_train[order], y_train[order], epochs=1)
        loss, accuracy = model.evaluate(x_val, y_val)
        report({"accuracy": accuracy, "loss": loss, "step": epoch}, epoch, train.state_of(model),
               config["reports"])


def state_trainable(config: dict) -> None:
    """The whole-exploit timing's member (pbt_functions.state_member's twin): a state of
    ``mib`` MiB saved with ``torch.save`` into the checkpoint folder and restored with
    ``torch.load``, as Ray Tune's documentation does; score ``x``."""
    import torch
    from checkpoint_state import make_state

    member, log = tune.get_context().get_trial_id(), config["log"]
    first, checkpoint = 1, tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            saved = torch.load(os.path.join(folder, "state.pt"))
        state, first = saved["state"], saved["step"] + 1
        log_event(log, member, "ready")
    else:
        state = make_state(config["mib"])
    for step in range(first, config["steps"] + 1):
        time.sleep(STEP_SECONDS)
        log_event(log, member, "report")
        metrics = {"accuracy": config["x"], "step": step}
        if step % config["checkpoint_interval"]:
            tune.report(metrics)
            continue
        with tempfile.TemporaryDirectory() as folder:
            torch.save({"step": step, "state": state}, os.path.join(folder, "state.pt"))
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(folder))


def clipper(bounds: dict[str, tuple[float, float]]):
    """A ``custom_explore_fn`` keeping every perturbed value within its bounds."""
    def clip(config: dict) -> dict:
        for key, (low, high) in bounds.items():
            config[key] = min(max(config[key], low), high)
        return config
    return clip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", choices=("toy", "mlp", "state"), required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--population", type=int, required=True)
    parser.add_argument("--interval", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True, help="steps (epochs) per member")
    parser.add_argument("--bounds", type=json.loads, default={},
                        help='mlp: {"learning_rate": [low, high], "momentum": [low, high]}')
    parser.add_argument("--mib", type=int, default=1, help="state: the state's size in MiB")
    parser.add_argument("--log", help="state: the JSON-lines file of report and ready times")
    parser.add_argument("--step-seconds", type=float, default=0.0, help="toy: a step's time")
    parser.add_argument("--reports", type=Path, help="toy, mlp: the report file (default: in --dir)")
    parser.add_argument("--dir", type=Path, required=True, help="storage folder")
    parser.add_argument("--out", type=Path, required=True, help="JSON file for the result")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    reports = str((args.reports or args.dir / "reports").resolve())
    random.seed(args.seed)       # PBT's choices of donors, factors and resamples
    np.random.seed(args.seed)    # the initial members' draws
    if args.problem == "toy":
        bounds = {"lr": LR_BOUNDS}
        space = {"lr": tune.uniform(*LR_BOUNDS)}
        trainable, fixed = toy_trainable, {"checkpoint_interval": args.interval,
                                           "step_seconds": args.step_seconds, "reports": reports}
    elif args.problem == "state":
        bounds = {"x": (0.0, 1.0)}
        space = {"x": tune.uniform(0.0, 1.0)}
        trainable, fixed = state_trainable, {"checkpoint_interval": args.interval,
                                             "mib": args.mib, "log": args.log}
    else:
        bounds = {key: tuple(value) for key, value in args.bounds.items()}
        space = {"learning_rate": tune.loguniform(*bounds["learning_rate"]),
                 "momentum": tune.uniform(*bounds["momentum"])}
        trainable, fixed = mlp_trainable, {"batch_size": 100, "hidden": [128], "seed": 0,
                                           "reports": reports}
    scheduler = PopulationBasedTraining(
        time_attr="training_iteration", perturbation_interval=args.interval,
        quantile_fraction=0.25, resample_probability=0.25, perturbation_factors=(1.2, 0.8),
        hyperparam_mutations=dict(space), custom_explore_fn=clipper(bounds), synch=False)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [*PATHS, os.environ.get("PYTHONPATH")]))
    ray.init(num_cpus=args.population, include_dashboard=False, log_to_driver=False,
             logging_level="ERROR")
    try:
        tuner = tune.Tuner(
            trainable,
            param_space={**space, **fixed, "steps": args.steps},
            tune_config=tune.TuneConfig(scheduler=scheduler, metric="accuracy", mode="max",
                                        num_samples=args.population, reuse_actors=True),
            run_config=tune.RunConfig(storage_path=str(args.dir.resolve()), name="pbt", verbose=0,
                                      failure_config=tune.FailureConfig(fail_fast=True)))
        started = time.perf_counter()
        results = tuner.fit()
        seconds = time.perf_counter() - started
    finally:
        ray.shutdown()
    errors = [str(r.error) for r in results if r.error is not None]
    if errors:
        raise SystemExit(f"ray_pbt: a trial failed: {errors[0][-2000:]}")
    finals = [r.metrics["accuracy"] for r in results]
    args.out.write_text(json.dumps({"score": max(finals), "epochs": count_reports(reports),
                                    "fit_seconds": seconds,
                                    "exploits": scheduler._num_perturbations}))


if __name__ == "__main__":
    main()
