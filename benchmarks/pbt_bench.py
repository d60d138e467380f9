"""PBT benchmark: what population-based training finds at a fixed budget, what one exploit
costs, and how long a search takes, against diel's other strategies and Ray Tune.

Run from the repository root (it launches ``mpiexec`` and the Ray Tune peer itself)::

    python benchmarks/pbt_bench.py --ray-python /work/bench-venv/bin/python
    python benchmarks/pbt_bench.py --quick          # a smoke run: small budgets, one seed
    python benchmarks/pbt_bench.py --parts quality --problems toy --systems "diel pbt"
                                                    # a subset, the others shown not run

(a) **Quality** at a fixed budget, ``--seeds`` seeds (default 5), on two problems:

* *toy*: Ray Tune's PBT example problem (its examples/pbt_function.py, ported in
  benchmarks/pbt_functions.py): the accuracy grows fastest at a learning rate that
  depends on the accuracy itself, so no fixed learning rate converges; 8 members, 100
  steps each of 0.05 s (a sleep: below), decisions every 4 steps, ``lr`` uniform in
  [0.0001, 0.02];
* *mlp*: the trainer's MLP (784-128-10, SGD) on the shipped MNIST subset, examples/pbt's
  member function (through pbt_functions.mlp_member, which counts its reports); 4
  members, 12 epochs each, decisions every 2 epochs, ``learning_rate`` log-uniform in
  [1e-4, 0.1] and ``momentum`` uniform in [0.5, 0.95].

Systems, each given ``population x steps`` epochs: diel ``pbt`` (``population`` members
on as many workers, ``interval``, ``max_epochs`` = ``steps``, quantile 0.25, resample
probability 0.25, perturbation factors 0.8 and 1.2); diel ``random`` (``population``
trials of the whole length: the same epochs); diel ``random`` with ``pruner: halving``
(``min_epochs`` = the interval, ``eta`` 3, as many trials as the budget holds by
successive halving's count, and stopped at the budget: below); and Ray Tune 2.60.0's
``PopulationBasedTraining`` with the same population, interval, budget, space and
defaults (benchmarks/peers/ray_pbt.py). The score of a search is the best final accuracy
of a trial that trained the whole length; the table gives its median and quartiles over
the seeds, and the epochs each search trained. Targets (issue 21): diel ``pbt``'s median
>= Ray Tune PBT's, and > ``random``'s.

What makes the comparison fair (each a fault of an earlier version of this script):

* *The same knowledge of a member's end.* Ray Tune stops a trial at ``steps`` before its
  scheduler sees that last result, so a member is never ranked or exploited at its end;
  diel's ``pbt`` is told the same with ``max_epochs: steps`` (without it, a member in the
  bottom at its last interval epoch would exploit and retrain from the donor's step).
* *Epochs counted where they are trained.* Every report a member makes appends to a
  report file (pbt_functions.Counted in diel's members, the peer's trainables likewise),
  so the epochs of a search are all it trained, those an exploit superseded (diel: a
  member going on from a donor's earlier step; Ray Tune: a restore to the donor's
  checkpoint) and those of trials halving stopped included, not the trials' final
  epochs. A PBT search may also train fewer than its budget: a member that goes on from
  a donor's later step (in both systems, the donor's latest decision) skips the steps
  between, which the donor trained.
* *Steps that take time.* The toy's steps cost nothing in Ray's example; in diel's
  asynchronous PBT, members then race through many steps while one waits for its
  exploit, and Ray Tune's function trainables are paced by its driver at every report
  anyway. Real steps take time: the toy's take 0.05 s in both systems (a sleep before
  Ray's unchanged score function; 100 steps are 5 s a member, well under a minute for a
  search at this machine's load), so the members' pace, not the engines' bookkeeping,
  sets how far apart they drift.
* *The same budget for halving.* The toy's accuracy is clipped at 0, successive halving
  lets every trial tied with the k-th best through a rung, and many trials sit at 0: by
  its trial count alone it trained about 4x the budget. Its members now stop at their
  next report once the search has trained ``population x steps`` epochs in all (the
  report file's count; a few more, one report per running member, can land at the
  limit), so the trials still running then end short of the whole length and do not
  score, and a trial starting after that returns untrained (pbt_functions.counted).

(b) **Exploit cost**: the latency of one exploit, the donor's state (1, 10 and 100 MiB:
benchmarks/checkpoint_state.py, a model's and an SGD optimizer's ``state_dict``)
reaching the member ready to train. *diel*: ``mpiexec -n 3`` benchmarks/pbt_exploit.py,
``dist_tread`` of the donor's checkpoint from the tuple space into the member's rank (on
the tuple server's node a private map of the server's memory file: no copy), ``unpack``
and load. *Ray Tune*: a trial restored from a checkpoint of the same state
(``tune.get_checkpoint()``, ``as_directory()``, ``torch.load``; benchmarks/peers/
ray_checkpoint.py), which counts only the restore itself, not the trial's pause and
restart that Ray's exploit also takes. Both are timed until the call returns and until
every byte of the state's tensors has been read once (*touched*, ready to train:
checkpoint_state.touch, the same for both). Target: diel touched <= 1/5 of Ray Tune's
touched at 100 MiB.
And *a whole exploit*, in a PBT search of each system (4 members holding a state of that
size, an interval of 2 steps of 0.2 s, 10 steps; ``--searches`` searches a size): from
the member's report at the decision to the donor's state loaded in the member's next
run (pbt_functions.state_member and the peer's twin log the times): the member's own
checkpoint at that step, the order, the end of its run, its dispatch (diel) or pause
and restart (Ray Tune), and the restore, as a user waits for them.

(c) **Wall time** of each search of (a), launch to exit (benchmarks/timing.py's window:
``mpiexec`` and its ranks' start for diel; the peer's process, ``ray.init`` included,
for Ray Tune, whose ``Tuner.fit`` time alone is shown beside it).

Every seed runs every system in turn (diel pbt, asynchronous as Ray Tune's by default,
and synchronous, in generations; diel random, diel halving, Ray Tune), so
a slow spell of the shared machine does not land on one system only. Markdown tables go
to stdout, progress to stderr. A system that cannot run is shown with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from pbt_functions import STEP_SECONDS, TOY_STEP_SECONDS, count_reports, exploit_latencies  # noqa: E402
from search_quality import Refused, quartiles, run_workflow, workflow  # noqa: E402
from timing import compile_sources, launch_to_exit, ray_missing  # noqa: E402

from diel.executive.command import find_mpiexec  # noqa: E402

TIMEOUT_S = 900
QUANTILE = 0.25
RESAMPLE_PROBABILITY = 0.25
PERTURB = [0.8, 1.2]
ETA = 3
EXPLOIT_TARGET = 0.2       # issue 21: one exploit <= 1/5 of Ray Tune's restore at 100 MB
SYSTEMS = ("diel pbt", "diel pbt sync", "diel random", "diel halving", "Ray Tune PBT")
PBT_SYSTEMS = ("diel pbt", "diel pbt sync")   # the systems the targets judge


@dataclass(frozen=True)
class Problem:
    """One quality problem: its space, its member function and its budget."""

    name: str
    title: str
    space: Mapping[str, Mapping[str, Any]]
    run: str
    fixed: Mapping[str, Any]
    length_key: str              # the fixed parameter holding the steps per member
    population: int
    interval: int
    steps: int

    @property
    def budget(self) -> int:
        """Epochs a search of this problem is given: population x steps."""
        return self.population * self.steps

    def worker(self, reports: Path, budget: int | None = None) -> dict[str, Any]:
        """The worker module: each report counted in the file ``reports``; with
        ``budget``, members stop once it holds that many (pbt_functions.counted)."""
        limit = {} if budget is None else {"budget": budget}
        return {"function": "worker", "settings": {
            "run": self.run, "timeout": TIMEOUT_S,
            "params": {**self.fixed, self.length_key: self.steps, "reports": str(reports),
                       **limit}}}


def problems(quick: bool) -> dict[str, Problem]:
    """The two problems (module docstring); ``quick`` shrinks them for a smoke run."""
    toy = dict(population=4, interval=4, steps=16) if quick else dict(population=8, interval=4, steps=100)
    mlp = dict(population=2, interval=2, steps=4) if quick else dict(population=4, interval=2, steps=12)
    return {
        "toy": Problem("toy", "Ray's PBT toy", {"lr": {"uniform": [0.0001, 0.02]}},
                       f"{HERE / 'pbt_functions.py'}:toy_member",
                       {"seed": 0, "step_seconds": TOY_STEP_SECONDS}, "steps", **toy),
        "mlp": Problem("mlp", "MNIST MLP", {"learning_rate": {"loguniform": [1e-4, 0.1]},
                                            "momentum": {"uniform": [0.5, 0.95]}},
                       f"{HERE / 'pbt_functions.py'}:mlp_member",
                       {"batch_size": 100, "hidden": [128], "seed": 0}, "epochs", **mlp),
    }


def halving_trials(problem: Problem) -> int:
    """Trials of a successive-halving search that train ``population x steps`` epochs by
    the synchronous count: all reach the first rung, a third of those each next one."""
    rungs = [problem.interval * ETA ** i for i in range(64)
             if problem.interval * ETA ** i < problem.steps]
    ends = rungs[1:] + [problem.steps]
    per_trial = rungs[0] + sum((end - rung) / ETA ** (i + 1)
                               for i, (rung, end) in enumerate(zip(rungs, ends)))
    return max(problem.population, round(problem.population * problem.steps / per_trial))


@dataclass
class Cell:
    """One system on one problem: per seed its score, epochs trained and wall times."""

    scores: list[float] = field(default_factory=list)
    epochs: list[int] = field(default_factory=list)
    walls: list[float] = field(default_factory=list)
    fits: list[float] = field(default_factory=list)
    note: str | None = None


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# -- (a) quality and (c) wall time -----------------------------------------------------------
def diel_workflow(problem: Problem, system: str, seed: int, reports: Path) -> dict[str, Any]:
    """The workflow of one diel search of ``system`` (module docstring), its members'
    reports counted in the file ``reports``."""
    budget = None
    if system in PBT_SYSTEMS:
        strategy: Any = {"pbt": {"population": problem.population, "interval": problem.interval,
                                 "max_epochs": problem.steps, "quantile": QUANTILE,
                                 "resample_probability": RESAMPLE_PROBABILITY,
                                 "perturb": PERTURB, "synchronous": system == "diel pbt sync"}}
        trials, extra = problem.population, None
    elif system == "diel random":
        strategy, trials, extra = "random", problem.population, None
    else:
        strategy, trials, budget = "random", halving_trials(problem), problem.budget
        extra = {"pruner": {"halving": {"min_epochs": problem.interval, "eta": ETA}}}
    return workflow(strategy, problem.space, problem.worker(reports, budget), trials, seed,
                    workers=problem.population, extra=extra)


def diel_search(problem: Problem, system: str, seed: int) -> tuple[float, int, float]:
    """(score, epochs trained, launch-to-exit seconds) of one diel search; the epochs are
    every report its members made (module docstring)."""
    with tempfile.TemporaryDirectory(prefix="diel-pbt-bench-") as tmp:
        reports = Path(tmp) / "reports"
        flow = diel_workflow(problem, system, seed, reports)
        seconds, rows = run_workflow(flow, Path(tmp), timeout=TIMEOUT_S)
        epochs = count_reports(reports)
    full = [row["accuracy"] for row in rows
            if row["status"] == "ok" and row["epoch"] == problem.steps]
    if not full:
        sys.exit(f"{system} on {problem.name} (seed {seed}): no trial trained all "
                 f"{problem.steps} steps; statuses {[row['status'] for row in rows]}")
    return max(full), epochs, seconds


def ray_search(ray_python: str, problem: Problem, seed: int,
               folder: Path) -> tuple[float, int, float, float]:
    """(score, epochs trained, launch-to-exit seconds, Tuner.fit seconds) of one Ray Tune
    PBT search."""
    out = folder / f"ray-{problem.name}-{seed}.json"
    bounds = {name: spec.get("uniform") or spec.get("loguniform") for name, spec in problem.space.items()}
    argv = [ray_python, str(HERE / "peers" / "ray_pbt.py"), "--problem", problem.name,
            "--seed", str(seed), "--population", str(problem.population),
            "--interval", str(problem.interval), "--steps", str(problem.steps),
            "--step-seconds", str(problem.fixed.get("step_seconds", 0.0)),
            "--bounds", json.dumps(bounds), "--dir", str(folder / f"ray-{problem.name}-{seed}"),
            "--reports", str(folder / f"ray-{problem.name}-{seed}.reports"), "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    seconds, done = launch_to_exit(argv, REPO, env, TIMEOUT_S)
    if done.returncode != 0:
        sys.exit(f"pbt_bench: the Ray Tune peer failed on {problem.name} (seed {seed}):\n"
                 f"{done.stderr[-3000:]}")
    result = json.loads(out.read_text())
    return result["score"], result["epochs"], seconds, result["fit_seconds"]


def quality(chosen: Sequence[Problem], seeds: Sequence[int], ray_python: str | None,
            ray_note: str | None, root: Path,
            systems: Sequence[str] = SYSTEMS) -> dict[tuple[str, str], Cell]:
    """Every system of ``systems`` (the others are shown not run) on every problem,
    seed by seed."""
    cells = {(p.name, s): Cell() for p in chosen for s in SYSTEMS}
    for problem in chosen:
        cells[problem.name, "Ray Tune PBT"].note = ray_note
        for system in set(SYSTEMS) - set(systems):
            cells[problem.name, system].note = "not run (--systems)"
    for seed in seeds:
        for problem in chosen:
            for system in SYSTEMS:
                cell = cells[problem.name, system]
                if cell.note is not None:
                    continue
                if system == "Ray Tune PBT":
                    score, epochs, wall, fit = ray_search(ray_python, problem, seed, root)
                    cell.fits.append(fit)
                else:
                    try:
                        score, epochs, wall = diel_search(problem, system, seed)
                    except Refused as refused:
                        cell.note = f"refused by diel: {refused}"
                        continue
                cell.epochs.append(epochs)
                cell.scores.append(score)
                cell.walls.append(wall)
                progress(f"  seed {seed}, {problem.name}, {system}: best {score:.4g}, "
                         f"{epochs} epochs (budget {problem.budget}) in {wall:.1f} s")
    return cells


# -- (b) exploit cost ------------------------------------------------------------------------
def diel_exploits(sizes: list[int], folder: Path) -> dict[str, dict[int, float]]:
    """Seconds of one exploit through the tuple space until it returns and until its
    state is touched (EXPLOIT_TIMES), per size (MiB): one timed after one warm-up, in a
    launch of benchmarks/pbt_exploit.py."""
    out = folder / "exploit.json"
    argv = [find_mpiexec(), "-n", "3", sys.executable, str(HERE / "pbt_exploit.py"),
            "--sizes", *map(str, sizes), "--repeats", "1", "--dir", str(folder / "exploit"),
            "--out", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    if done.returncode != 0:
        sys.exit(f"pbt_bench: pbt_exploit.py failed:\n{done.stderr[-2000:]}")
    found = json.loads(out.read_text())
    return {when: {int(mib): times[0] for mib, times in found[when].items()} for when in EXPLOIT_TIMES}


def ray_restores(ray_python: str, sizes: list[int], folder: Path) -> dict[str, dict[int, float]]:
    """Seconds of Ray Tune's restore of a checkpoint until it returns and until its state
    is touched, per size: one run of benchmarks/peers/ray_checkpoint.py (one restore per
    size)."""
    out = folder / "ray-restore.json"
    argv = [ray_python, str(HERE / "peers" / "ray_checkpoint.py"), "--sizes", *map(str, sizes),
            "--dir", str(folder / "ray-restore"), "--out", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S)
    if done.returncode != 0:
        sys.exit(f"pbt_bench: the Ray Tune checkpoint peer failed:\n{done.stderr[-2000:]}")
    found = json.loads(out.read_text())
    return {when: {int(mib): seconds for mib, seconds in found[key].items()}
            for when, key in zip(EXPLOIT_TIMES, ("restore", "restore touched"))}


#: When an exploit is timed to: its call returns (the state loaded), and its state touched
#: (every byte of its tensors read once: ready to train; the target is judged on this).
EXPLOIT_TIMES = ("returns", "touched")


def exploits(sizes: list[int], repeats: int, ray_python: str | None, ray_note: str | None,
             root: Path) -> tuple[dict[str, dict[int, float]], dict[str, dict[int, float]] | None]:
    """Median seconds of one exploit per EXPLOIT_TIMES and size for diel and (unless
    ``ray_note``) Ray Tune, the two alternated ``repeats`` times."""
    ours = {when: {mib: [] for mib in sizes} for when in EXPLOIT_TIMES}
    theirs = {when: {mib: [] for mib in sizes} for when in EXPLOIT_TIMES}
    for rep in range(repeats):
        folder = Path(tempfile.mkdtemp(prefix=f"exploit-{rep}-", dir=root))
        runs = [(ours, diel_exploits(sizes, folder))]
        if ray_note is None:
            runs.append((theirs, ray_restores(ray_python, sizes, folder)))
        for table, found in runs:
            for when, row in found.items():
                for mib, seconds in row.items():
                    table[when][mib].append(seconds)
        progress(f"  exploit cost, repetition {rep + 1}/{repeats} done")

    def medians(table: dict) -> dict[str, dict[int, float]]:
        return {when: {mib: statistics.median(v) for mib, v in row.items()} for when, row in table.items()}

    return medians(ours), (None if ray_note else medians(theirs))


#: The whole-exploit timing's search: members, interval, steps.
WHOLE = {"population": 4, "interval": 2, "steps": 10}


def diel_whole_exploits(mib: int, folder: Path) -> list[float]:
    """Seconds of each exploit of a diel PBT search whose members hold ``mib`` MiB:
    from the member's report at the decision to its state loaded in its next run."""
    log = folder / f"diel-{mib}.jsonl"
    worker = {"function": "worker", "settings": {
        "run": f"{HERE / 'pbt_functions.py'}:state_member", "timeout": TIMEOUT_S,
        "params": {"mib": mib, "log": str(log), "steps": WHOLE["steps"]}}}
    strategy = {"pbt": {"population": WHOLE["population"], "interval": WHOLE["interval"]}}
    run = folder / f"diel-{mib}"
    run.mkdir()
    flow = workflow(strategy, {"x": {"uniform": [0.0, 1.0]}}, worker, WHOLE["population"], 0,
                    workers=WHOLE["population"])
    run_workflow(flow, run, timeout=TIMEOUT_S)
    return exploit_latencies(str(log))


def ray_whole_exploits(ray_python: str, mib: int, folder: Path) -> list[float]:
    """The same for Ray Tune's PopulationBasedTraining (peers/ray_pbt.py ``--problem state``)."""
    log = folder / f"ray-{mib}.jsonl"
    argv = [ray_python, str(HERE / "peers" / "ray_pbt.py"), "--problem", "state", "--seed", "0",
            "--population", str(WHOLE["population"]), "--interval", str(WHOLE["interval"]),
            "--steps", str(WHOLE["steps"]), "--mib", str(mib), "--log", str(log),
            "--dir", str(folder / f"ray-{mib}"), "--out", str(folder / f"ray-{mib}.json")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    if done.returncode != 0:
        sys.exit(f"pbt_bench: the Ray Tune peer failed (state, {mib} MiB):\n{done.stderr[-2000:]}")
    return exploit_latencies(str(log))


def whole_exploits(sizes: list[int], repeats: int, ray_python: str | None, ray_note: str | None,
                   root: Path) -> dict[str, dict[int, list[float]]]:
    """Every whole exploit's seconds per system and size, over ``repeats`` searches each,
    the systems alternated."""
    times: dict[str, dict[int, list[float]]] = {"diel": {m: [] for m in sizes},
                                                "Ray Tune": {m: [] for m in sizes}}
    for rep in range(repeats):
        folder = Path(tempfile.mkdtemp(prefix=f"whole-{rep}-", dir=root))
        for mib in sizes:
            times["diel"][mib] += diel_whole_exploits(mib, folder)
            if ray_note is None:
                times["Ray Tune"][mib] += ray_whole_exploits(ray_python, mib, folder)
        progress(f"  whole exploits, repetition {rep + 1}/{repeats} done")
    return times


# -- the tables ------------------------------------------------------------------------------
def spread(values: Sequence[float], digits: str = ".3g") -> str:
    low, median, high = quartiles(values)
    return f"{median:{digits}} ({low:{digits}}–{high:{digits}})"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds < 10 else f"{seconds:.2f} s"


def print_quality(chosen: Sequence[Problem], seeds: Sequence[int],
                  cells: Mapping[tuple[str, str], Cell]) -> None:
    print(f"**Quality**: best final accuracy of a trial that trained the whole length, "
          f"median (quartiles) over {len(seeds)} seed(s); the epochs each search trained, "
          f"every report its members made (those an exploit superseded included), median "
          f"(quartiles), its budget being population x steps.\n")
    heads = [f"{p.title}: {p.population} x {p.steps}, interval {p.interval}" for p in chosen]
    print("| system | " + " | ".join(f"{h} | epochs" for h in heads) + " |")
    print("|---" * (2 * len(chosen) + 1) + "|")
    for system in SYSTEMS:
        row = []
        for problem in chosen:
            cell = cells[problem.name, system]
            if cell.note is not None or not cell.scores:
                row += [cell.note or "not run", ""]
            else:
                row += [spread(cell.scores), spread(cell.epochs, ".0f")]
        print(f"| {system} | " + " | ".join(row) + " |")
    print()
    for problem, system in ((problem, system) for problem in chosen for system in PBT_SYSTEMS):
        ours = cells[problem.name, system]
        if ours.note is not None or not ours.scores:
            print(f"- {problem.title}: targets not judged ({system} did not run).")
            continue
        median = statistics.median(ours.scores)
        parts = []
        for peer, words in (("Ray Tune PBT", ">= Ray Tune PBT's median"), ("diel random", "> diel random's median")):
            cell = cells[problem.name, peer]
            if cell.note is not None or not cell.scores:
                parts.append(f"{words}: not judged ({peer} not measured)")
                continue
            theirs = statistics.median(cell.scores)
            met = median >= theirs if peer == "Ray Tune PBT" else median > theirs
            parts.append(f"{words}: {median:.4g} vs {theirs:.4g}, ratio {median / theirs:.2f}, "
                         f"{'met' if met else '**missed**'}")
        print(f"- {problem.title}: {system} {'; '.join(parts)}.")
    print()


def print_walls(chosen: Sequence[Problem], cells: Mapping[tuple[str, str], Cell]) -> None:
    print("**Wall time** of one search, launch to exit (s), median (quartiles) over the "
          "seeds; for Ray Tune also `Tuner.fit` alone. The ratio is diel pbt's time over "
          "Ray Tune PBT's.\n")
    print("| problem | " + " | ".join(SYSTEMS) + " | Ray Tune `Tuner.fit` | diel pbt / Ray Tune |")
    print("|---" * (len(SYSTEMS) + 3) + "|")
    for problem in chosen:
        row = []
        for system in SYSTEMS:
            cell = cells[problem.name, system]
            row.append(spread(cell.walls, ".1f") if cell.walls else "not run")
        ray, ours = cells[problem.name, "Ray Tune PBT"], cells[problem.name, "diel pbt"]
        row.append(spread(ray.fits, ".1f") if ray.fits else "not run")
        row.append(f"{statistics.median(ours.walls) / statistics.median(ray.walls):.2f}"
                   if ours.walls and ray.walls else "—")
        print(f"| {problem.title} | " + " | ".join(row) + " |")
    print()


def print_exploits(sizes: list[int], ours: Mapping[str, Mapping[int, float]],
                   ray: Mapping[str, Mapping[int, float]] | None, ray_note: str | None,
                   repeats: int) -> None:
    print(f"**One exploit**: the donor's state reaching the member (median of {repeats}), "
          f"until the call returns with the state loaded, and until every byte of its "
          f"tensors has been read once (*touched*: ready to train; a sum over each tensor, "
          f"the same for both). diel: `dist_tread` from the tuple space into the member's "
          f"rank (on the tuple server's node a private map of the server's memory file, no "
          f"copy), `unpack`, load. Ray Tune: restore of a checkpoint in the trial "
          f"(`get_checkpoint`, `as_directory`, `torch.load`), its pause and restart not "
          f"counted.\n")
    print("| state | diel returns | diel touched | Ray Tune 2.60.0 restore returns | "
          "Ray Tune touched | diel / Ray Tune, touched |")
    print("|---|---|---|---|---|---|")
    for mib in sizes:
        cells = [ms(ours[when][mib]) for when in EXPLOIT_TIMES]
        if ray is None:
            cells += ["—", "—", "—"]
        else:
            cells += [ms(ray[when][mib]) for when in EXPLOIT_TIMES]
            cells.append(f"{ours['touched'][mib] / ray['touched'][mib]:.2f}")
        print(f"| {mib} MiB | " + " | ".join(cells) + " |")
    if ray is None:
        print(f"\nRay Tune: {ray_note}")
    elif 100 in ours["touched"]:
        share = ours["touched"][100] / ray["touched"][100]
        print(f"\nTarget: one exploit at 100 MiB, touched, ≤ 1/5 of Ray Tune's restore, "
              f"touched: {share:.2f}, {'met' if share <= EXPLOIT_TARGET else '**missed**'}.")
    else:
        print("\nTarget at 100 MiB: not judged, 100 MiB not run.")
    print()


def print_whole(sizes: list[int], times: Mapping[str, Mapping[int, list[float]]],
                ray_note: str | None, repeats: int) -> None:
    print(f"**A whole exploit** in a PBT search ({WHOLE['population']} members, interval "
          f"{WHOLE['interval']}, {WHOLE['steps']} steps of {STEP_SECONDS} s, {repeats} "
          f"search(es) a size): from the member's report at the decision to the donor's "
          f"state loaded in its next run, the member's own checkpoint at that step, the "
          f"order, the end of its run, its dispatch or restart and the restore included; "
          f"median (quartiles) over every exploit, and their number.\n")
    print("| state | diel | exploits | Ray Tune 2.60.0 | exploits | diel / Ray Tune |")
    print("|---|---|---|---|---|---|")
    for mib in sizes:
        ours, theirs = times["diel"][mib], times["Ray Tune"][mib]
        cells = [spread(ours, ".3f") if ours else "none", str(len(ours))]
        cells += [spread(theirs, ".3f") if theirs else (ray_note or "none"), str(len(theirs))]
        cells.append(f"{statistics.median(ours) / statistics.median(theirs):.2f}"
                     if ours and theirs else "—")
        print(f"| {mib} MiB | " + " | ".join(cells) + " |")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ray-python", help="a Python with ray[tune]==2.60.0 and torch (the peer)")
    parser.add_argument("--seeds", type=int, default=5, help="seeds per system and problem (default 5)")
    parser.add_argument("--problems", default="toy,mlp", help="comma-separated: toy, mlp")
    parser.add_argument("--parts", default="quality,exploit", help="comma-separated: quality, exploit")
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        help="comma-separated, for the quality part (default all): "
                             + ", ".join(SYSTEMS))
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 10, 100],
                        help="exploit state sizes in MiB (default 1 10 100)")
    parser.add_argument("--repeats", type=int, default=3, help="repetitions of the exploit timings, the median is shown (default 3)")
    parser.add_argument("--searches", type=int, default=1,
                        help="searches a size for the whole-exploit timing (default 1)")
    parser.add_argument("--quick", action="store_true",
                        help="small budgets, one seed, states of 1 and 10 MiB (a smoke run)")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.sizes = 1, [1, 10]
    table = problems(args.quick)
    names = [n for n in args.problems.split(",") if n]
    parts = [p for p in args.parts.split(",") if p]
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if not set(names) <= set(table) or not set(parts) <= {"quality", "exploit"}:
        parser.error(f"--problems takes {', '.join(table)}; --parts takes quality, exploit")
    if not systems or not set(systems) <= set(SYSTEMS):
        parser.error(f"--systems takes {', '.join(SYSTEMS)}")
    if min(args.seeds, args.repeats, args.searches, *args.sizes) < 1:
        parser.error("--seeds, --repeats, --searches and --sizes must be at least 1")

    compile_sources(REPO)
    started = time.perf_counter()
    load = os.getloadavg()
    print(f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}; Python "
          f"{platform.python_version()}; {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; "
          f"load average at the start {load[0]:.2f}\n")
    ray_note = ray_missing(args.ray_python, with_torch=True)
    ray_note = ray_note and f"not measured: {ray_note}"
    with tempfile.TemporaryDirectory(prefix="diel-pbt-bench-") as tmp:
        root = Path(tmp)
        if "quality" in parts:
            chosen = [table[n] for n in names]
            cells = quality(chosen, range(args.seeds), args.ray_python, ray_note, root, systems)
            print_quality(chosen, range(args.seeds), cells)
            print_walls(chosen, cells)
        if "exploit" in parts:
            ours, ray = exploits(args.sizes, args.repeats, args.ray_python, ray_note, root)
            print_exploits(args.sizes, ours, ray, ray_note, args.repeats)
            whole = whole_exploits(args.sizes, args.searches, args.ray_python, ray_note, root)
            print_whole(args.sizes, whole, ray_note, args.searches)
    print(f"Load average at the end: {os.getloadavg()[0]:.2f}; "
          f"{time.perf_counter() - started:.0f} s in all.")


if __name__ == "__main__":
    main()
