"""Search benchmark: diel's dispatch rate against Optuna and libEnsemble, and its scaling.

Run from the repository root (it launches ``mpiexec`` itself)::

    python benchmarks/search_bench.py            # both parts
    python benchmarks/search_bench.py --part dispatch --trials 2000 --workers 4
    python benchmarks/search_bench.py --part scaling

(a) **dispatch**: ``--trials`` no-op trials of a random search through the whole diel
path (search master, tuple space, ``--workers`` worker copies, every trial written to
SQLite) in trials per second, beside Optuna 5 (``RandomSampler``, SQLite ``RDBStorage``,
sequential and with ``n_jobs=workers``) and libEnsemble (local comms, ``--workers``
workers, one point and 100 points per generator call) on the same trial count, measured
in the same run. Peers that are not installed are skipped with a note
(``pip install optuna libensemble``; neither is a diel dependency).

(b) **scaling**: 64 trials that each sleep 0.5 s with 1, 2, 4, 8 and 16 worker copies;
efficiency = ideal time (64 x 0.5 s / copies) / measured time.

diel's time runs from the first trial's start to the last trial's end as recorded in its
database, so MPI start-up is not counted; the peers' from the start to the end of their
optimize/run call. Ratios above 1 mean diel is faster.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from datetime import datetime
from pathlib import Path

import diel.results

REPO = Path(__file__).resolve().parent.parent
HERE = REPO / "benchmarks"
WORKFLOW = textwrap.dedent("""
    modules:
      space: {{function: tuplespace}}
      search:
        function: search
        settings:
          strategy: random
          mode: async
          workers: worker
          seed: 1
          max_trials: {trials}
          space: {{x: {{uniform: [0, 1]}}}}
          progress_interval: 3600
      worker:
        function: search_workers:sleeper
        copies: {workers}
        settings: {{sleep: {sleep}}}
    services: [space]
""")


def mpiexec() -> str:
    local = Path(sys.executable).parent / "mpiexec"
    return str(local) if local.exists() else "mpiexec"


def run_diel(trials: int, workers: int, sleep: float) -> tuple[float, float]:
    """(seconds first trial start -> last trial end, wall seconds of the whole job)."""
    with tempfile.TemporaryDirectory(prefix="diel-bench-") as tmp:
        workflow = Path(tmp) / "bench.yaml"
        workflow.write_text(WORKFLOW.format(trials=trials, workers=workers, sleep=sleep))
        started = time.perf_counter()
        done = subprocess.run([mpiexec(), "-n", str(workers + 2), sys.executable, "-m", "diel",
                               "run", str(workflow)], cwd=HERE, capture_output=True, text=True,
                              timeout=900, env={**os.environ, "OMP_NUM_THREADS": "1"})
        wall = time.perf_counter() - started
        if done.returncode != 0:
            sys.exit(f"diel run failed ({done.returncode}):\n{done.stderr[-3000:]}")
        with diel.results.open(Path(tmp) / "bench.db") as results:
            rows = results.trials(study="bench", status="ok")
    if len(rows) != trials:
        sys.exit(f"diel recorded {len(rows)} ok trials, expected {trials}")
    start = min(datetime.fromisoformat(row["started_at"]) for row in rows)
    end = max(datetime.fromisoformat(row["finished_at"]) for row in rows)
    return (end - start).total_seconds(), wall


def run_optuna(trials: int, jobs: int) -> float:
    """Seconds ``study.optimize`` takes for ``trials`` no-op trials with SQLite storage."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="optuna-bench-") as tmp:
        study = optuna.create_study(storage=f"sqlite:///{tmp}/optuna.db", direction="maximize",
                                    sampler=optuna.samplers.RandomSampler(seed=1))

        def objective(trial: "optuna.Trial") -> float:
            return 1 - abs(trial.suggest_float("x", 0, 1) - 0.3)

        started = time.perf_counter()
        study.optimize(objective, n_trials=trials, n_jobs=jobs)
        return time.perf_counter() - started


def run_libensemble(trials: int, workers: int, batch: int) -> float:
    """Seconds libEnsemble's ``Ensemble.run`` takes (in its own process)."""
    done = subprocess.run([sys.executable, str(HERE / "peers" / "libensemble_noop.py"),
                           "--evaluations", str(trials), "--workers", str(workers),
                           "--batch", str(batch)], capture_output=True, text=True, timeout=900,
                          cwd=tempfile.gettempdir())
    for line in done.stdout.splitlines():
        if line.startswith("ELAPSED "):
            return float(line.split()[1])
    sys.exit(f"libEnsemble run failed ({done.returncode}):\n{done.stderr[-3000:]}")


def installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def dispatch(trials: int, workers: int) -> None:
    print(f"(a) dispatch: {trials} no-op trials, {workers} workers, results in SQLite")
    ours, wall = run_diel(trials, workers, 0.0)
    rate = trials / ours
    print(f"  {'diel (master + tuple space + SQLite)':<44} {rate:>9.0f} trials/s"
          f"   ({ours:.2f} s; {wall:.2f} s with MPI start-up)")
    peers = []
    if installed("optuna"):
        peers += [("Optuna 5, SQLite, sequential", run_optuna(trials, 1)),
                  (f"Optuna 5, SQLite, n_jobs={workers}", run_optuna(trials, workers))]
    else:
        print("  Optuna: not installed (pip install optuna), skipped")
    if installed("libensemble"):
        peers += [(f"libEnsemble, local comms, 1 point/gen call", run_libensemble(trials, workers, 1)),
                  (f"libEnsemble, local comms, 100 points/gen call",
                   run_libensemble(trials, workers, 100))]
    else:
        print("  libEnsemble: not installed (pip install libensemble), skipped")
    for name, seconds in peers:
        peer_rate = trials / seconds
        print(f"  {name:<44} {peer_rate:>9.0f} trials/s   diel is {rate / peer_rate:5.1f}x")


def scaling(trials: int, sleep: float, copies: list[int]) -> None:
    print(f"(b) scaling: {trials} trials of {sleep} s each")
    print(f"  {'copies':>6} {'ranks':>6} {'ideal s':>8} {'measured s':>11} {'efficiency':>11}")
    for count in copies:
        ideal = trials * sleep / count
        measured, _ = run_diel(trials, count, sleep)
        print(f"  {count:>6} {count + 2:>6} {ideal:>8.2f} {measured:>11.2f} {ideal / measured:>10.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("dispatch", "scaling", "both"), default="both")
    parser.add_argument("--trials", type=int, default=2000, help="no-op trials in (a)")
    parser.add_argument("--workers", type=int, default=4, help="worker copies in (a)")
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores; diel, Python {sys.version.split()[0]}")
    if args.part in ("dispatch", "both"):
        dispatch(args.trials, args.workers)
    if args.part in ("scaling", "both"):
        scaling(64, 0.5, [1, 2, 4, 8, 16])


if __name__ == "__main__":
    main()
