"""Optuna's side of the Optuna benchmark: one objective searched by several processes
sharing one study, as Optuna documents parallel optimization.

Run by benchmarks/optuna_bench.py in a fresh process, timed from launch to exit::

    python benchmarks/peers/optuna_parallel.py --objective FILE.py:objective --trials 200 \\
        --processes 4 --journal JOURNAL --out RESULT.json

The study lives in a ``JournalStorage`` on a ``JournalFileBackend`` (one append-only
file with file locks: Optuna's recommendation for processes sharing a study without a
database server, where SQLite locks or corrupts on a network file system). This process
creates the study, starts ``--processes`` processes that each load it and run
``study.optimize`` for their share of the ``--trials``, waits for them and writes the
best value, the trial states and each finished trial's completion time (epoch seconds)
as JSON to ``--out``. Each process samples with ``TPESampler(constant_liar=True,
seed=seed + i)`` (diel's ``tpe`` defaults; distinct seeds, or the processes would
propose alike) and prunes with ``MedianPruner(n_startup_trials=5, n_warmup_steps=2)``
(diel's ``median: {min_trials: 5, warmup_epochs: 2}``). Optuna's per-trial INFO lines are
off (verbosity WARNING), as diel prints no per-trial line.
"""

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path


def storage(journal: Path):
    import optuna
    from optuna.storages.journal import JournalFileBackend

    return optuna.storages.JournalStorage(JournalFileBackend(str(journal)))


def load_objective(spec: str):
    path, name = spec.rsplit(":", 1)
    module_spec = importlib.util.spec_from_file_location("bench_objective", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return getattr(module, name)


def work(args: argparse.Namespace) -> None:
    """One of the processes: its share of the trials."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(
        study_name="bench", storage=storage(args.journal),
        sampler=optuna.samplers.TPESampler(constant_liar=True, seed=args.seed + args.worker),
        pruner=optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=2))
    share = args.trials // args.processes + (args.worker < args.trials % args.processes)
    study.optimize(load_objective(args.objective), n_trials=share)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objective", required=True, help="FILE.py:function")
    parser.add_argument("--trials", type=int, required=True)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--journal", type=Path, required=True, help="journal file to create")
    parser.add_argument("--out", type=Path, help="JSON file for the result")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        work(args)
        return

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    optuna.create_study(study_name="bench", storage=storage(args.journal), direction="maximize")
    argv = [sys.executable, __file__, "--objective", args.objective, "--trials",
            str(args.trials), "--processes", str(args.processes), "--seed", str(args.seed),
            "--journal", str(args.journal)]
    workers = [subprocess.Popen([*argv, "--worker", str(i)]) for i in range(args.processes)]
    if any(worker.wait() != 0 for worker in workers):
        sys.exit("an Optuna process failed")
    study = optuna.load_study(study_name="bench", storage=storage(args.journal))
    states = optuna.trial.TrialState
    finished = [t for t in study.trials if t.state in (states.COMPLETE, states.PRUNED)]
    args.out.write_text(json.dumps({
        "best": study.best_value, "trials": len(study.trials),
        "pruned": sum(t.state == states.PRUNED for t in finished),
        "completions": [t.datetime_complete.timestamp() for t in finished]}))


if __name__ == "__main__":
    main()
