"""Optuna benchmark: one objective written for Optuna, searched by diel and by Optuna.

Run from the repository root (it launches ``mpiexec`` and the peer itself)::

    python benchmarks/optuna_bench.py                  # 200 trials, 4 workers, median of 3
    python benchmarks/optuna_bench.py --quick          # 20 trials, once: checks it runs

The objective is examples/optuna/objective.py, unchanged for both: a conditional choice
of scikit-learn classifier (define-by-run ``suggest_*``), ``report(value, step)`` and
``should_prune()`` at each of its 8 steps, the validation accuracy returned.

(a) **search**: ``--trials`` trials on ``--workers`` workers, TPE, median pruning:

* diel: ``mpiexec -n W+2 python -m diel run`` of a workflow like
  examples/optuna/search.yaml (``strategy: tpe``, no ``space:``, ``pruner: {median:
  {min_trials: 5, warmup_epochs: 2}}``, isolated workers, results in SQLite);
* Optuna (the installed version): W processes sharing one ``JournalStorage`` on a
  ``JournalFileBackend``, as Optuna documents parallel optimization without a database
  server (benchmarks/peers/optuna_parallel.py: ``TPESampler(constant_liar=True)``,
  ``MedianPruner(n_startup_trials=5, n_warmup_steps=2)``).

Each is timed from launch to exit (benchmarks/timing.py: start-up, imports and the
study's creation inside the window), and its best value read from its own store. The
systems run in turns (repetition 1 of both, then 2, then 3); each figure is the median
of the repetitions.

(b) **suggest round trip**: what one ``trial.suggest_*`` costs the trial, from its
call to its return, in an isolated child (the default): for a parameter the space does
not declare (child -> rank -> master -> rank -> child: the master's sampler draws it)
and for a declared one (checked on the rank). benchmarks/suggest_probe.py suggests 50
undeclared and 10 declared floats a trial; the figure is the median over the trials of
each trial's mean, for ``random`` and ``tpe``.

The tables are printed as markdown; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import textwrap
from pathlib import Path

import diel.results
from diel.executive.command import find_mpiexec as mpiexec

REPO = Path(__file__).resolve().parent.parent
HERE = REPO / "benchmarks"
sys.path.insert(0, str(HERE))

from search_bench import installed, progress, version  # noqa: E402
from timing import REPEATS, compile_sources, launch_to_exit, median_figures  # noqa: E402

OBJECTIVE = REPO / "examples" / "optuna" / "objective.py"
TIMEOUT_S = 1800
SEED = 7
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
SEARCH = textwrap.dedent("""
    modules:
      space: {{function: tuplespace}}
      search:
        function: search
        settings:
          strategy: {strategy}
          seed: {seed}
          max_trials: {trials}
          workers: fit
          metrics: [value, suggest_ms, declared_ms]
          objective: value
          direction: maximize
          {extra}
      fit:
        function: worker
        copies: {workers}
        settings: {{run: '{run}', timeout: 600}}
    services: [space]
""")
PRUNER = "pruner: {median: {min_trials: 5, warmup_epochs: 2}}"
PROBE_SPACE = "space: {" + ", ".join(f"d{i}: {{uniform: [0.0, 1.0]}}" for i in range(10)) + "}"


def diel_run(folder: Path, strategy: str, trials: int, workers: int, run: str,
             extra: str) -> tuple[float, list[dict]]:
    """One ``mpiexec ... diel run`` in ``folder``: its launch-to-exit seconds and trials."""
    workflow = folder / "bench.yaml"
    workflow.write_text(SEARCH.format(strategy=strategy, seed=SEED, trials=trials,
                                      workers=workers, run=run, extra=extra))
    argv = [mpiexec(), "-n", str(workers + 2), sys.executable, "-m", "diel", "run",
            str(workflow)]
    wall, done = launch_to_exit(argv, folder, ENV, TIMEOUT_S)
    if done.returncode != 0:
        sys.exit(f"diel run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    with diel.results.open(folder / "bench.db") as results:
        rows = results.trials(study="bench")
    if len(rows) != trials:
        sys.exit(f"diel recorded {len(rows)} trials, expected {trials}")
    return wall, rows


def run_diel(trials: int, workers: int) -> dict[str, float]:
    """diel's TPE on the objective: launch to exit, best value, pruned trials."""
    with tempfile.TemporaryDirectory(prefix="diel-optuna-bench-") as tmp:
        wall, rows = diel_run(Path(tmp), "tpe", trials, workers, f"{OBJECTIVE}:objective",
                              PRUNER)
    ok = [row["objective"] for row in rows if row["status"] == "ok"]
    return {"launch": wall, "best": max(ok),
            "pruned": sum(row["status"] == "pruned" for row in rows)}


def run_optuna(trials: int, workers: int) -> dict[str, float]:
    """Optuna's processes on one JournalStorage: launch to exit, best value, pruned."""
    with tempfile.TemporaryDirectory(prefix="optuna-bench-") as tmp:
        out = Path(tmp) / "result.json"
        argv = [sys.executable, str(HERE / "peers" / "optuna_parallel.py"), "--objective",
                f"{OBJECTIVE}:objective", "--trials", str(trials), "--processes",
                str(workers), "--seed", str(SEED), "--journal", str(Path(tmp) / "journal.log"),
                "--out", str(out)]
        wall, done = launch_to_exit(argv, tmp, ENV, TIMEOUT_S)
        if done.returncode != 0 or not out.exists():
            sys.exit(f"optuna_parallel.py failed ({done.returncode}):\n{done.stderr[-3000:]}")
        result = json.loads(out.read_text())
    if result["trials"] != trials:
        sys.exit(f"Optuna ran {result['trials']} trials, expected {trials}")
    return {"launch": wall, "best": result["best"], "pruned": result["pruned"]}


def search(trials: int, workers: int, repeats: int) -> None:
    systems = {f"**diel** {version('diel')} `tpe`, isolated workers, SQLite":
               lambda: run_diel(trials, workers)}
    if installed("optuna"):
        systems[f"Optuna {version('optuna')}, {workers} processes, one `JournalStorage` "
                "(`JournalFileBackend`)"] = lambda: run_optuna(trials, workers)
    else:
        progress("Optuna: not installed (pip install optuna), skipped")
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in systems}
    for rep in range(repeats):
        for name, run in systems.items():
            figures = run()
            runs[name].append(figures)
            progress(f"  repetition {rep + 1}/{repeats}: {name}: {figures['launch']:.2f} s "
                     f"launch to exit, best {figures['best']:.4f}, {figures['pruned']:.0f} pruned")
    table = {name: median_figures(figures) for name, figures in runs.items()}
    print(f"**An Optuna objective, searched** (examples/optuna/objective.py, unchanged): "
          f"{trials} trials, {workers} workers, TPE with median pruning, median of "
          f"{repeats}.\n")
    print("| system and settings | launch to exit | trials/s, launch to exit | best "
          "accuracy | trials pruned | each run's best |")
    print("|---|---|---|---|---|---|")
    for name, fig in table.items():
        bests = ", ".join(f"{run['best']:.4f}" for run in runs[name])
        print(f"| {name} | {fig['launch']:.2f} s | {trials / fig['launch']:.1f} | "
              f"{fig['best']:.4f} | {fig['pruned']:.0f} | {bests} |")
    names = list(table)
    if len(names) == 2:
        ours, theirs = table[names[0]]["launch"], table[names[1]]["launch"]
        ratio = theirs / ours
        how = f"{ratio:.2f}x faster" if ratio >= 1 else f"{1 / ratio:.2f}x slower"
        print(f"\ndiel is {how} than Optuna from launch to exit.")
    print()


def round_trip(trials: int, workers: int, repeats: int) -> None:
    """(b): one suggest_* call's cost, undeclared (through the master) and declared."""
    rows = []
    for strategy in ("random", "tpe"):
        figures = []
        for _ in range(repeats):
            with tempfile.TemporaryDirectory(prefix="diel-suggest-bench-") as tmp:
                _, trial_rows = diel_run(Path(tmp), strategy, trials, workers,
                                         f"{HERE / 'suggest_probe.py'}:probe", PROBE_SPACE)
            metrics = [row.get("metrics") or row for row in trial_rows]
            figures.append({key: statistics.median(float(m[key]) for m in metrics)
                            for key in ("suggest_ms", "declared_ms")})
        fig = median_figures(figures)
        progress(f"  suggest round trip, {strategy}: {fig['suggest_ms']:.3f} ms undeclared, "
                 f"{fig['declared_ms']:.4f} ms declared")
        rows.append((strategy, fig))
    print(f"**One `trial.suggest_float` call** in an isolated child, {workers} workers, "
          f"{trials} trials of 50 undeclared and 10 declared parameters, median over the "
          f"trials of each trial's mean, median of {repeats}.\n")
    print("| strategy | undeclared: asks the master (one round trip) | declared: checked "
          "on the rank |")
    print("|---|---|---|")
    for strategy, fig in rows:
        print(f"| `{strategy}` | {fig['suggest_ms']:.3f} ms | {fig['declared_ms']:.4f} ms |")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200, help="trials of the search (a)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--quick", action="store_true",
                        help="20 trials, one repetition: check that it runs")
    args = parser.parse_args()
    if args.quick:
        args.trials, args.repeats = 20, 1
    if args.trials < 10 or args.workers < 1 or args.repeats < 1:
        parser.error("--trials must be at least 10, --workers and --repeats at least 1")
    compile_sources(REPO)
    search(args.trials, args.workers, args.repeats)
    round_trip(max(args.workers, args.trials // 10), args.workers, args.repeats)


if __name__ == "__main__":
    main()
