"""Search benchmark: diel's dispatch rate against Optuna and libEnsemble, and its scaling.

Run from the repository root (it launches ``mpiexec`` itself)::

    python benchmarks/search_bench.py            # both parts
    python benchmarks/search_bench.py --part dispatch --trials 2000 --workers 4
    python benchmarks/search_bench.py --part scaling

(a) **dispatch**: first the cost of isolation alone: the median time of a no-op trial run
by an isolated child (diel.worker.isolated, a message round trip) against the same trial
in the rank. Then ``--trials`` no-op trials of a random search through the whole diel
path (search master, tuple space, ``--workers`` worker copies, every trial written to
SQLite) in trials per second, with isolated and with in-process workers, beside Optuna 5 (``RandomSampler``, SQLite ``RDBStorage``,
sequential and with ``n_jobs=workers``) and libEnsemble (local comms, ``--workers``
workers, one point and 100 points per generator call) on the same trial count, measured
in the same run. Peers that are not installed are skipped with a note
(``pip install optuna libensemble``; neither is a diel dependency).

(b) **scaling**: 64 trials that each sleep 0.5 s with 1, 2, 4, 8 and 16 worker copies,
in-process and isolated; efficiency = ideal time (64 x 0.5 s / copies) / measured time.

diel's time runs from the first trial's start to the last trial's end as recorded in its
database, so MPI start-up is not counted; the peers' from the start to the end of their
optimize/run call. Ratios above 1 mean diel is faster.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
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
sys.path.insert(0, str(HERE))
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
        function: worker
        copies: {workers}
        settings: {{run: search_workers:sleeper, isolate: {isolate}, params: {{sleep: {sleep}}}}}
    services: [space]
""")


def mpiexec() -> str:
    local = Path(sys.executable).parent / "mpiexec"
    return str(local) if local.exists() else "mpiexec"


def run_diel(trials: int, workers: int, sleep: float, isolate: bool = False) -> tuple[float, float]:
    """(seconds first trial start -> last trial end, wall seconds of the whole job)."""
    with tempfile.TemporaryDirectory(prefix="diel-bench-") as tmp:
        workflow = Path(tmp) / "bench.yaml"
        workflow.write_text(WORKFLOW.format(trials=trials, workers=workers, sleep=sleep,
                                            isolate=str(isolate).lower()))
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


def isolation_cost(trials: int = 2000) -> tuple[float, float]:
    """Median ms per no-op trial run by an isolated child and in this process."""
    from diel.worker.inprocess import InProcessRunner
    from diel.worker.isolated import IsolatedRunner
    from search_workers import sleeper

    def per_trial(runner) -> float:
        info = {"number": 0, "study": "bench", "copy": 0, "device": None, "params": {"x": 0.5}}
        runner.run(info, lambda step, metrics: False, None)   # starts the child
        times = []
        for _ in range(trials):
            started = time.perf_counter()
            runner.run(info, lambda step, metrics: False, None)
            times.append(time.perf_counter() - started)
        runner.close()
        return statistics.median(times) * 1e3

    return (per_trial(IsolatedRunner("search_workers:sleeper", HERE, os.environ, 5.0)),
            per_trial(InProcessRunner(sleeper)))


def dispatch(trials: int, workers: int) -> None:
    print(f"(a) dispatch: {trials} no-op trials, {workers} workers, results in SQLite")
    isolated_ms, inprocess_ms = isolation_cost()
    print(f"  one no-op trial: {isolated_ms:.3f} ms in an isolated child, {inprocess_ms:.3f} ms "
          f"in the rank: isolation costs {isolated_ms - inprocess_ms:.3f} ms per trial")
    isolated, wall_isolated = run_diel(trials, workers, 0.0, isolate=True)
    print(f"  {'diel, isolated workers (the default)':<44} {trials / isolated:>9.0f} trials/s"
          f"   ({isolated:.2f} s; {wall_isolated:.2f} s with MPI start-up)")
    ours, wall = run_diel(trials, workers, 0.0)
    rate = trials / ours
    print(f"  {'diel, in-process workers (isolate: false)':<44} {rate:>9.0f} trials/s"
          f"   ({ours:.2f} s; {wall:.2f} s with MPI start-up)")
    peers = []
    if installed("optuna"):
        peers += [("Optuna 5, SQLite, sequential", run_optuna(trials, 1)),
                  (f"Optuna 5, SQLite, n_jobs={workers}", run_optuna(trials, workers))]
    else:
        print("  Optuna: not installed (pip install optuna), skipped")
    if installed("libensemble"):
        peers += [("libEnsemble, local comms, 1 point/gen call", run_libensemble(trials, workers, 1)),
                  ("libEnsemble, local comms, 100 points/gen call",
                   run_libensemble(trials, workers, 100))]
    else:
        print("  libEnsemble: not installed (pip install libensemble), skipped")
    for name, seconds in peers:
        peer_rate = trials / seconds
        print(f"  {name:<44} {peer_rate:>9.0f} trials/s   diel is {rate / peer_rate:5.1f}x")


def scaling(trials: int, sleep: float, copies: list[int]) -> None:
    print(f"(b) scaling: {trials} trials of {sleep} s each; efficiency = ideal / measured")
    print(f"  {'copies':>6} {'ranks':>6} {'ideal s':>8} {'in-process':>11} {'isolated':>11}")
    for count in copies:
        ideal = trials * sleep / count
        inprocess, _ = run_diel(trials, count, sleep)
        isolated, _ = run_diel(trials, count, sleep, isolate=True)
        print(f"  {count:>6} {count + 2:>6} {ideal:>8.2f} {ideal / inprocess:>10.1%} "
              f"{ideal / isolated:>10.1%}")


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
