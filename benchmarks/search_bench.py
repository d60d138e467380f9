"""Search benchmark: diel's dispatch against Optuna, libEnsemble and Ray Tune, isolation
cost, start-up, scaling.

Run from the repository root (it launches ``mpiexec`` and the peers itself)::

    python benchmarks/search_bench.py --ray-python /work/bench-venv/bin/python  # everything
    python benchmarks/search_bench.py --part dispatch --trials 500 2000 --workers 4
    python benchmarks/search_bench.py --part startup
    python benchmarks/search_bench.py --part scaling --copies 16

Every system is timed over the same two windows (benchmarks/timing.py):

* **launch to exit** of a fresh process: for diel the whole ``mpiexec -n W+2 python -m
  diel run``; for Optuna and libEnsemble ``python benchmarks/peers/<peer>.py``, with the
  imports and the creation of the study and its storage inside the window;
* **steady state**: trials per second between the 10% and the 90% completion, from each
  system's own per-trial timestamps: diel's ``finished_at`` (stamped by the master when a
  result arrives), Optuna's ``datetime_complete``, libEnsemble's ``sim_ended_time``
  (stamped by its manager when a result arrives).

(a) **dispatch**: first the cost of isolation alone (a no-op trial run by an isolated
child, a message round trip, against the same trial in the rank). Then, for each
``--trials`` count, no-op trials of a random search with ``--workers`` workers through
diel (master, tuple space, workers, every trial in SQLite; isolated and in-process
workers), Optuna (``RandomSampler``, SQLite ``RDBStorage`` with diel's WAL and
``synchronous=NORMAL``; sequential and ``n_jobs=workers``; only up to
``--optuna-max-trials``, as its rate falls while its study grows) and libEnsemble (local
comms, results in memory; 1 and 100 points per generator call) and Ray Tune
(``--ray-python``: the Python of a separate environment with ``ray[tune]==2.60.0``, never
a diel dependency; its default settings and ``reuse_actors=True``; only up to
``--ray-max-trials``, as it is slow; benchmarks/peers/ray_noop.py). Peers that are not
installed are skipped with a note (``pip install optuna libensemble``; neither is a diel
dependency). Each table says whether diel's launch-to-exit rate reaches libEnsemble's with
one point per call (target).

(s) **start-up**: a 4-trial search of two isolated workers (``mpiexec -n 4``) from launch
to exit, beside ``mpiexec -n 6 python -c "import mpi4py.MPI"`` (MPI's own start), the two
alternated; target: at most 1.2 s.

(b) **scaling**: 64 trials that each sleep 0.5 s on 1, 2, 4, 8 and 16 worker copies (``--copies``),
in-process and isolated; efficiency = ideal time (64 x 0.5 s / copies) over the work
window (the first trial's start to the last one's end, from diel's database) and over
launch to exit.

Every figure is the median of 3 repetitions (run in turns: repetition 1 of every system,
then 2, then 3). The tables are printed as markdown, in the README's format; progress
goes to stderr.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable

import diel.results
from diel.executive.command import find_mpiexec as mpiexec

REPO = Path(__file__).resolve().parent.parent
HERE = REPO / "benchmarks"
sys.path.insert(0, str(HERE))

from timing import RAY_VERSION, REPEATS, compile_sources, launch_to_exit, median_figures, \
    ray_missing, steady_rate  # noqa: E402

TIMEOUT_S = 1800
ISOLATION_TARGET_MS = 5.0      # issue 9: isolating a trial costs at most 5 ms
SCALING_TARGET = 0.95          # issue 9: 16 copies keep 95% of the ideal
STARTUP_TARGET_S = 1.2         # issue 22: a 4-trial search of two workers starts and ends in 1.2 s
WORKFLOW = textwrap.dedent("""
    modules:
      space: {{function: tuplespace}}
      search:
        function: search
        settings:
          strategy: random
          workers: worker
          seed: 1
          max_trials: {trials}
          space: {{x: {{uniform: [0, 1]}}}}
      worker:
        function: worker
        copies: {workers}
        settings: {{run: search_workers:sleeper, isolate: {isolate}, params: {{sleep: {sleep}}}}}
    services: [space]
""")
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
DIEL_DB = "SQLite file, WAL, `synchronous=NORMAL`"


@dataclass(frozen=True)
class System:
    """One row of the dispatch table: who, with which settings, and how to run it."""

    name: str
    kept_in: str
    run: Callable[[int], dict[str, float]]   # trials -> {"launch": s, "steady": trials/s}
    peer: bool = True
    max_trials: int | None = None


def version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def run_diel(trials: int, workers: int, sleep: float, isolate: bool) -> dict[str, float]:
    """One ``mpiexec ... diel run`` of ``trials`` trials: its launch-to-exit seconds, its
    work window (first trial start to last trial end) and, from 10 trials, its
    steady-state rate."""
    with tempfile.TemporaryDirectory(prefix="diel-bench-") as tmp:
        workflow = Path(tmp) / "bench.yaml"
        workflow.write_text(WORKFLOW.format(trials=trials, workers=workers, sleep=sleep,
                                            isolate=str(isolate).lower()))
        argv = [mpiexec(), "-n", str(workers + 2), sys.executable, "-m", "diel", "run",
                str(workflow)]
        wall, done = launch_to_exit(argv, HERE, ENV, TIMEOUT_S)
        if done.returncode != 0:
            sys.exit(f"diel run failed ({done.returncode}):\n{done.stderr[-3000:]}")
        with diel.results.open(Path(tmp) / "bench.db") as results:
            rows = results.trials(study="bench", status="ok")
    if len(rows) != trials:
        sys.exit(f"diel recorded {len(rows)} ok trials, expected {trials}")
    ends = [datetime.fromisoformat(row["finished_at"]).timestamp() for row in rows]
    first = min(datetime.fromisoformat(row["started_at"]).timestamp() for row in rows)
    figures = {"launch": wall, "work": max(ends) - first}
    if trials >= 10:   # fewer have no 10%-90% window (the start-up's 4)
        figures["steady"] = steady_rate(ends)
    return figures


def run_peer(script: str, args: Callable[[Path], list[str]], trials: int,
             python: str = sys.executable) -> dict[str, float]:
    """One fresh ``python benchmarks/peers/<script> args(tmp)`` in a temporary folder
    ``tmp`` (``python``: the peer's interpreter): its launch-to-exit seconds and
    steady-state rate."""
    with tempfile.TemporaryDirectory(prefix="peer-bench-") as tmp:
        out = Path(tmp) / "times.json"
        argv = [python, str(HERE / "peers" / script), *args(Path(tmp)), "--out", str(out)]
        wall, done = launch_to_exit(argv, tmp, ENV, TIMEOUT_S)
        if done.returncode != 0 or not out.exists():
            sys.exit(f"{script} failed ({done.returncode}):\n{done.stderr[-3000:]}")
        completions = json.loads(out.read_text())["completions"]
    if len(completions) != trials:
        sys.exit(f"{script} completed {len(completions)} trials, expected {trials}")
    return {"launch": wall, "steady": steady_rate(completions)}



def systems(workers: int, optuna_max: int, ray_python: str | None,
            ray_max: int) -> list[System]:
    """diel's two rows and the installed peers' rows (a note for each missing peer)."""
    rows = [
        System(f"**diel** {version('diel')}, isolated workers: default settings", DIEL_DB,
               lambda n: run_diel(n, workers, 0.0, isolate=True), peer=False),
        System(f"diel {version('diel')}, in-process workers (`isolate: false`), "
               "otherwise default", DIEL_DB,
               lambda n: run_diel(n, workers, 0.0, isolate=False), peer=False),
    ]
    if installed("optuna"):
        optuna_db = "SQLite file (`RDBStorage`), WAL, `synchronous=NORMAL` as diel's"
        for jobs, how in ((1, "sequential"), (workers, f"`n_jobs={workers}` threads")):
            rows.append(System(
                f"Optuna {version('optuna')}, `RandomSampler`, {how}, log level WARNING",
                optuna_db,
                lambda n, jobs=jobs: run_peer("optuna_noop.py", lambda tmp: [
                    "--trials", str(n), "--jobs", str(jobs), "--db", str(tmp / "optuna.db")], n),
                max_trials=optuna_max))
    else:
        progress("Optuna: not installed (pip install optuna), skipped")
    if installed("libensemble"):
        for batch in (1, 100):
            rows.append(System(
                f"libEnsemble {version('libensemble')}, local comms, {workers} workers, "
                f"{batch} point{'s' if batch > 1 else ''} per generator call, log files off",
                "memory only (history array), no database",
                lambda n, batch=batch: run_peer("libensemble_noop.py", lambda tmp: [
                    "--evaluations", str(n), "--workers", str(workers),
                    "--batch", str(batch)], n)))
    else:
        progress("libEnsemble: not installed (pip install libensemble), skipped")
    missing = ray_missing(ray_python)
    if missing is None:
        for reuse, how in ((False, "default settings"), (True, "`reuse_actors=True`")):
            rows.append(System(
                f"Ray Tune {RAY_VERSION}, {how}, {workers} CPUs, one a trial",
                "Ray's result files (no database)",
                lambda n, reuse=reuse: run_peer("ray_noop.py", lambda tmp: [
                    "--trials", str(n), "--workers", str(workers), "--dir", str(tmp / "ray"),
                    *(["--reuse-actors"] if reuse else [])], n, python=ray_python),
                max_trials=ray_max))
    else:
        print(f"Ray Tune: not measured: {missing}.\n")
    return rows


def isolation_cost(repeats: int, calls: int = 2000) -> dict[str, float]:
    """Median ms per no-op trial run by an isolated child and in this process (each the
    median of ``calls`` calls), median of ``repeats`` repetitions."""
    from diel.worker.inprocess import InProcessRunner
    from diel.worker.isolated import IsolatedRunner
    from search_workers import sleeper

    def per_trial(runner) -> float:
        info = {"number": 0, "study": "bench", "copy": 0, "device": None, "params": {"x": 0.5}}
        runner.run(info, lambda step, metrics: False, None)   # starts the child
        times = []
        for _ in range(calls):
            started = time.perf_counter()
            runner.run(info, lambda step, metrics: False, None)
            times.append(time.perf_counter() - started)
        runner.close()
        return statistics.median(times) * 1e3

    return median_figures([
        {"isolated": per_trial(IsolatedRunner("search_workers:sleeper", HERE, os.environ, 5.0)),
         "inprocess": per_trial(InProcessRunner(sleeper))} for _ in range(repeats)])


def rate(value: float) -> str:
    """A rate in trials/s: whole numbers, with two significant digits under 10 (Ray
    Tune's default runs well under one trial a second)."""
    return f"{value:,.0f}" if value >= 10 else f"{value:.2g}"


def versus(ours: float, theirs: float) -> str:
    """``ours / theirs`` (rates) as 'N.NNx faster' or 'N.NNx slower'."""
    ratio = ours / theirs
    return f"{ratio:.2f}x faster" if ratio >= 1 else f"{1 / ratio:.2f}x slower"


def verdict(met: bool) -> str:
    return "met" if met else "missed"


def dispatch(counts: list[int], workers: int, optuna_max: int, repeats: int,
             ray_python: str | None, ray_max: int) -> None:
    cost = isolation_cost(repeats)
    extra = cost["isolated"] - cost["inprocess"]
    print(f"**Isolation** (median of {repeats}; each the median of 2,000 calls):\n")
    print("| one no-op trial | isolated child | in the rank | isolation costs |")
    print("|---|---|---|---|")
    print(f"| time per trial | {cost['isolated']:.3f} ms | {cost['inprocess']:.3f} ms | "
          f"**{extra:.2f} ms per trial** (target ≤ {ISOLATION_TARGET_MS:g} ms: "
          f"{verdict(extra <= ISOLATION_TARGET_MS)}) |\n")
    rows = systems(workers, optuna_max, ray_python, ray_max)
    for trials in counts:
        chosen = [s for s in rows if s.max_trials is None or trials <= s.max_trials]
        runs: dict[str, list[dict[str, float]]] = {s.name: [] for s in chosen}
        for rep in range(repeats):
            for system in chosen:
                figures = system.run(trials)
                runs[system.name].append(figures)
                progress(f"  {trials} trials, repetition {rep + 1}/{repeats}: {system.name}: "
                         f"{figures['launch']:.2f} s launch to exit, "
                         f"{rate(figures['steady'])} trials/s steady")
        table = {name: median_figures(figures) for name, figures in runs.items()}
        print(f"**Search dispatch**: {trials:,} no-op trials of a random search, {workers} "
              f"workers, median of {repeats}. *Launch to exit*: the whole process, start-up "
              "included; *steady state*: trials/s between the 10% and 90% completions, from "
              "each system's own per-trial timestamps. Ratios compare diel's first row "
              "(its default) with each peer, in the window named.\n")
        print("| system and settings | results kept in | launch to exit | trials/s, launch "
              "to exit | diel is (launch to exit) | trials/s, steady state | diel is "
              "(steady state) |")
        print("|---|---|---|---|---|---|---|")
        ours = table[chosen[0].name]
        for system in chosen:
            fig = table[system.name]
            launch_rate = trials / fig["launch"]
            print(f"| {system.name} | {system.kept_in} | {fig['launch']:.2f} s | "
                  f"{rate(launch_rate)} | "
                  f"{versus(trials / ours['launch'], launch_rate) if system.peer else ''} | "
                  f"{rate(fig['steady'])} | "
                  f"{versus(ours['steady'], fig['steady']) if system.peer else ''} |")
        libensemble = [s for s in chosen if s.name.startswith("libEnsemble") and
                       " 1 point " in s.name]
        if libensemble:
            theirs = trials / table[libensemble[0].name]["launch"]
            print(f"\ndiel's launch-to-exit rate {rate(trials / ours['launch'])} trials/s against "
                  f"libEnsemble's {rate(theirs)} with one point per call (target: at least "
                  f"as fast: {verdict(trials / ours['launch'] >= theirs)}).")
        skipped = [s.name for s in rows if s not in chosen]
        if skipped:
            print(f"\nNot run at {trials:,} trials (above --optuna-max-trials {optuna_max:,} "
                  f"or --ray-max-trials {ray_max:,}: Optuna's rate falls as its study grows, "
                  f"Ray Tune is slow): {'; '.join(skipped)}.")
        print()


def startup(repeats: int) -> None:
    """(s): a 4-trial search of two isolated workers from launch to exit, and MPI's own
    start (``mpiexec -n 6 python -c "import mpi4py.MPI"``), alternated, median of
    ``repeats``."""
    runs: list[dict[str, float]] = []
    for rep in range(repeats):
        search = run_diel(4, 2, 0.0, isolate=True)["launch"]
        mpi, done = launch_to_exit([mpiexec(), "-n", "6", sys.executable, "-c",
                                    "import mpi4py.MPI"], HERE, ENV, TIMEOUT_S)
        if done.returncode != 0:
            sys.exit(f"mpiexec -n 6 python -c 'import mpi4py.MPI' failed:\n{done.stderr[-3000:]}")
        runs.append({"search": search, "mpi": mpi})
        progress(f"  start-up, repetition {rep + 1}/{repeats}: search {search:.2f} s, "
                 f"MPI alone {mpi:.2f} s")
    fig = median_figures(runs)
    print(f"**Start-up** (median of {repeats}, the two alternated): launch to exit.\n")
    print("| what | launch to exit |")
    print("|---|---|")
    print(f"| a 4-trial search of two isolated workers (`mpiexec -n 4 python -m diel run`) | "
          f"**{fig['search']:.2f} s** (target ≤ {STARTUP_TARGET_S:g} s: "
          f"{verdict(fig['search'] <= STARTUP_TARGET_S)}) |")
    print(f"| `mpiexec -n 6 python -c \"import mpi4py.MPI\"` | {fig['mpi']:.2f} s |\n")


def scaling(trials: int, sleep: float, copies: list[int], repeats: int) -> None:
    modes = (("in-process workers (`isolate: false`)", False),
             ("isolated workers (the default)", True))
    runs: dict[tuple[bool, int], list[dict[str, float]]] = {
        (iso, n): [] for _, iso in modes for n in copies}
    for rep in range(repeats):
        for count in copies:
            for label, iso in modes:
                figures = run_diel(trials, count, sleep, isolate=iso)
                runs[(iso, count)].append(figures)
                progress(f"  scaling, repetition {rep + 1}/{repeats}: {count} copies, {label}: "
                         f"work {figures['work']:.2f} s, launch to exit {figures['launch']:.2f} s")
    table = {key: median_figures(figures) for key, figures in runs.items()}
    print(f"**Search scaling**: {trials} trials that each sleep {sleep} s, efficiency = ideal "
          f"time ({trials} × {sleep} s / copies) over the measured time, median of {repeats}. "
          "*Work window*: the first trial's start to the last one's end, from diel's "
          "database; *launch to exit*: the whole `mpiexec ... diel run` (MPI start-up, "
          "imports, schema, final commit).\n")
    print("| worker copies | " + " | ".join(str(n) for n in copies) + " |")
    print("|---" * (len(copies) + 1) + "|")
    for label, iso in modes:
        for window, key in (("work window", "work"), ("launch to exit", "launch")):
            cells = []
            for count in copies:
                eff = trials * sleep / count / table[(iso, count)][key]
                cell = f"{eff:.1%}"
                if count == max(copies) and key == "work":
                    cell = (f"**{cell}** (target ≥ {SCALING_TARGET:.0%}: "
                            f"{verdict(eff >= SCALING_TARGET)})")
                cells.append(cell)
            print(f"| {label}, {window} | " + " | ".join(cells) + " |")
    print()


def at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer of at least ``low``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value
    return parse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("dispatch", "startup", "scaling", "both"),
                        default="both", help="both: all three (default)")
    parser.add_argument("--trials", type=at_least(10), nargs="+", default=[500, 2000],
                        help="no-op trial counts in (a), one table each (default 500 2000)")
    parser.add_argument("--workers", type=at_least(1), default=4, help="worker copies in (a)")
    parser.add_argument("--optuna-max-trials", type=at_least(10), default=2000,
                        help="run Optuna only at trial counts up to this (default 2000)")
    parser.add_argument("--ray-python", metavar="PYTHON",
                        help=f"a Python with ray[tune]=={RAY_VERSION} (Ray Tune's rows; skipped "
                             "with a note without it)")
    parser.add_argument("--ray-max-trials", type=at_least(10), default=500,
                        help="run Ray Tune only at trial counts up to this (default 500)")
    parser.add_argument("--copies", type=at_least(1), nargs="+", default=[1, 2, 4, 8, 16],
                        help="worker copies in (b) (default 1 2 4 8 16)")
    parser.add_argument("--repeats", type=at_least(1), default=REPEATS,
                        help=f"repetitions per figure, the median is reported (default {REPEATS})")
    args = parser.parse_args()
    started = time.perf_counter()
    compile_sources(REPO)
    print(f"{os.cpu_count()} cores; Python {sys.version.split()[0]}, MPICH {version('mpich')}, "
          f"mpi4py {version('mpi4py')}; diel's sources byte-compiled first, as the peers' "
          f"installed packages are\n")
    if args.part in ("dispatch", "both"):
        dispatch(args.trials, args.workers, args.optuna_max_trials, args.repeats,
                 args.ray_python, args.ray_max_trials)
    if args.part in ("startup", "both"):
        startup(args.repeats)
    if args.part in ("scaling", "both"):
        scaling(64, 0.5, args.copies, args.repeats)
    progress(f"search_bench: {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
