"""Scale by simulation: how many workers one search master keeps busy.

Run from the repository root (no MPI, no workers: one process)::

    python benchmarks/scale_sim.py              # the full run (docs/scaling.md)
    python benchmarks/scale_sim.py --quick      # a smoke test, about 20 CPU-seconds
    python benchmarks/scale_sim.py --strategies random --workers 10 100 1000 --means 1 60

What is real: the search master (``diel.search.master.run_search``: its engine, the
sampler, the pass loop with its bulk commits and prefetch) writing every trial to a real
SQLite file in a temporary folder. What is simulated: N workers whose trials last
log-normal times around a mean (1 s, 60 s, 600 s by default) on a simulated clock
(scale_sim_world): the master's measured CPU time between its calls to the tuple space
moves the clock on, so a busy master makes finished workers wait. Tuple-space messages
cost what the real tuple server and client cost over the in-process transport
(scale_sim_messages), or the round trip given with ``--rtt-us``.

It prints, for each strategy, mean and N, the workers' utilization and the master's busy
fraction in the steady state (scale_sim_world.Figures: from the moment every worker is
running and a wave of results has come back to the moment the master puts its last
task); then
where one master saturates, by two measures:

* **master busy >= 90%**: found by bisection (in log N) between the simulated N; for a
  mean where no simulated N reaches it, extrapolated from another mean at the same rate
  of results (N / mean), on which the master's load depends;
* **workers' utilization < 90%**: N = capacity x mean / 0.9, where the capacity is the
  trials per second a saturated master handles (measured in the longest run whose
  master was busy 99% of the time); the largest N of a saturated random search is run
  again with ``--saturated-waves`` trials per worker to show the utilization falling
  (tasks queued ahead of the workers hide a saturated master in a short run).

A model-based sampler's proposals cost more as its study grows: its studies are capped
at ``--tpe-trials`` trials (and N larger than a quarter of that is not simulated), the
master's cost per trial is measured as the study grows and fitted with a line, and the
saturation N is given for larger studies from that line. One simulation per figure (no
repeats). Tables are markdown; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from scale_sim_diel import SimStudy, available  # noqa: E402
from scale_sim_messages import measure_messages  # noqa: E402
from scale_sim_world import Figures, Messages, World  # noqa: E402

BUSY = 0.9         # a master busy this fraction of the time is saturated
UTILIZATION = 0.9  # workers below this utilization are held back by the master
SIZES = (1_000, 10_000)   # study sizes of the model-based saturation table (<= 10x the cap)


@dataclass(frozen=True)
class Run:
    """One simulation: its settings, what it measured, what the database holds."""

    strategy: str
    mean: float
    figures: Figures
    recorded: dict[str, list[int]]    # trial numbers in the database, by status
    growth: list[tuple[int, float]]   # (study size, master seconds per trial)
    commit_s: float                   # master CPU seconds in Storage.record (all commits)
    wall_s: float                     # real seconds the simulation took
    queued: int                       # tasks the master queues per worker (its prefetch)

    @property
    def workers(self) -> int:
        return self.figures.workers

    @property
    def steady(self) -> bool:
        return self.figures.window is not None


CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}


def simulate(strategy: str, workers: int, mean: float, trials: int, messages: Messages,
             sigma: float = 0.5, seed: int = 1, epochs: int = 0,
             folder: str | Path | None = None, database: str | None = None,
             clock: str = "cpu", prefetch: int | str | None = None) -> Run:
    """Run the real master for ``trials`` trials of ``strategy`` against ``workers``
    simulated workers whose trials last ``mean`` simulated seconds on average; its
    database is a SQLite file in ``folder`` (a temporary folder, removed after, when
    None), or ``database`` (a URL). The master's work is timed on ``clock`` (CLOCKS);
    ``prefetch`` is its setting of that name (None: see SimStudy). Raises RuntimeError
    unless the database holds every simulated trial exactly once, ``ok``."""
    with tempfile.TemporaryDirectory(prefix="scale_sim_") as scratch:
        study = SimStudy(strategy, trials, workers, folder or scratch, mean, sigma, seed, epochs,
                         database, prefetch)
        world = World(workers, study.task_tag, study.report_tag, study.duration, study.result,
                      study.epoch, messages, epochs, CLOCKS[clock])
        started = time.perf_counter()
        commit = study.run(world, CLOCKS[clock])
        wall = time.perf_counter() - started
        recorded = study.recorded()
        if list(recorded) != ["ok"] or sorted(recorded["ok"]) != list(range(trials)) or \
                len(world.starts) != trials:
            found = {status: len(numbers) for status, numbers in recorded.items()}
            raise RuntimeError(f"{strategy}, {workers} workers: the workers ran "
                               f"{len(world.starts)} of {trials} trials and the database "
                               f"holds {found}; expected each trial once, ok")
        return Run(strategy, mean, world.figures(min_window=mean / 2), recorded,
                   world.cost_by_study_size(), commit, wall, study.queued)


class Experiment:
    """The runs of one invocation, and the rules that size them."""

    def __init__(self, args: argparse.Namespace, messages: Messages) -> None:
        self.args, self.messages = args, messages
        self.runs: list[Run] = []

    def trials(self, strategy: str, workers: int, waves: int) -> int | None:
        """Trials to simulate (None: too many): every worker runs about ``waves`` trials;
        a random search's runs are capped; a model-based study is ``--tpe-trials`` long
        and simulated only for N it gives ``waves`` trials each."""
        a = self.args
        if strategy == "random":
            return min(a.max_trials, max(a.min_trials, waves * workers))
        return a.tpe_trials if a.tpe_trials >= waves * workers else None

    def sizes(self, strategy: str) -> list[int]:
        """The N to simulate: ``--workers``, and for a capped (model-based) study also the
        largest N the cap allows, when ``--workers`` has one between it and the next."""
        sizes = sorted(self.args.workers)
        if strategy != "random":
            largest = self.args.tpe_trials // self.args.waves
            if largest >= 1 and largest not in sizes and any(n > largest for n in sizes):
                sizes = sorted([*sizes, largest])
        return sizes

    def run(self, strategy: str, workers: int, mean: float, waves: int | None = None) -> Run | None:
        """Simulate one configuration, every worker running about ``waves`` trials
        (default ``--waves``); None when it is too large to simulate."""
        trials = self.trials(strategy, workers, waves or self.args.waves)
        if trials is None:
            return None
        a = self.args
        run = simulate(strategy, workers, mean, trials, self.messages, a.sigma, a.seed, a.epochs,
                       database=a.database, clock=a.clock, prefetch=a.prefetch)
        f = run.figures
        print(f"  {strategy} mean {mean:g} s, {workers:,} workers, {trials:,} trials: "
              f"utilization {_pct(f.utilization)}, master busy {_pct(f.master_busy)} "
              f"({run.wall_s:.1f} s)", file=sys.stderr, flush=True)
        self.runs.append(run)
        return run

    def of(self, strategy: str, mean: float | None = None) -> list[Run]:
        """The steady runs of ``strategy`` (and ``mean``) by N, the longest of each N."""
        runs = sorted((r for r in self.runs if r.strategy == strategy and r.steady and
                       (mean is None or r.mean == mean)),
                      key=lambda r: (r.workers, r.mean, -r.figures.trials))
        return [r for i, r in enumerate(runs)
                if i == 0 or (r.workers, r.mean) != (runs[i - 1].workers, runs[i - 1].mean)]

    def refine(self, strategy: str, mean: float) -> None:
        """Bisect (in log N) between the largest simulated N whose master is busy less
        than :data:`BUSY` and the smallest busy more, ``--refine`` times."""
        for _ in range(self.args.refine):
            bracket = _bracket(self.of(strategy, mean), busy)
            if bracket is None or bracket[0] is None:
                return
            low, high = bracket
            middle = round(math.sqrt(low.workers * high.workers))
            if middle in (low.workers, high.workers) or self.run(strategy, middle, mean) is None:
                return

    def run_longer(self, strategy: str, mean: float) -> None:
        """Run the largest N again, longer, when its master is saturated: the tasks
        queued ahead of the workers (prefetch) hide a saturated master until they are
        used up, so a short run overstates the workers' utilization."""
        runs = self.of(strategy, mean)
        if runs and busy(runs[-1]):
            self.run(strategy, runs[-1].workers, mean, self.args.saturated_waves)

    def capacity(self, strategy: str) -> tuple[float, Run] | None:
        """Trials per second a saturated master handles (its busy time per trial, in the
        longest run whose master was busy 99% of the time), and that run."""
        saturated = [r for r in self.of(strategy) if r.figures.master_busy >= 0.99]
        if not saturated:
            return None
        run = max(saturated, key=lambda r: r.figures.trials)
        return 1.0 / run.figures.master_s_per_trial, run


def _bracket(runs: list[Run], crossed: Callable[[Run], bool]) -> tuple[Run | None, Run] | None:
    """(the last run before, the first run that ``crossed``), or None when none did."""
    for i, run in enumerate(runs):
        if crossed(run):
            return (runs[i - 1] if i else None), run
    return None


def busy(run: Run) -> bool:
    return run.figures.master_busy >= BUSY   # type: ignore[operator]


def held_back(run: Run) -> bool:
    return run.figures.utilization < UTILIZATION   # type: ignore[operator]


def _pct(x: float | None) -> str:
    if x is None:
        return "–"
    return f"{100 * x:.2f}%" if x < 0.01 else f"{100 * x:.1f}%"


def _duration(seconds: float) -> str:
    if seconds < 1:
        return f"{1e3 * seconds:.0f} ms"
    return f"{seconds:.1f} s" if seconds < 120 else \
        f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _n(x: float) -> str:
    return f"{x:,.0f}" if x < 1e6 else f"{x:.2g}"


def crossed_at(experiment: Experiment, strategy: str, mean: float,
               crossed: Callable[[Run], bool]) -> str | None:
    """Where ``crossed`` first holds for ``mean``: between two simulated N; else at the
    same rate of results (N / mean), on which the master's load depends, as for another
    mean; None when no simulated run crossed."""
    found = _bracket(experiment.of(strategy, mean), crossed)
    if found is not None:
        low, high = found
        return f"≤ {high.workers:,}" if low is None else f"{low.workers:,} – {high.workers:,}"
    rates = [(b[0], b[1], m) for m in experiment.args.means
             if (b := _bracket(experiment.of(strategy, m), crossed)) is not None]
    if not rates:
        return None
    low, high, m = min(rates, key=lambda x: x[1].workers / x[2])
    lo = f"{_n(low.workers * mean / m)} – " if low is not None else "≤ "
    return f"{lo}{_n(high.workers * mean / m)} (extrapolated from {m:g} s at the same N / mean)"


def busy_at(experiment: Experiment, strategy: str, mean: float) -> str:
    """Where the master becomes busy :data:`BUSY` of the time for ``mean``."""
    found = crossed_at(experiment, strategy, mean, busy)
    if found is not None:
        return found
    largest = max((r.workers for r in experiment.of(strategy, mean)), default=0)
    return f"beyond {largest:,}" if largest else "not simulated"


def held_back_at(experiment: Experiment, strategy: str, mean: float) -> str:
    """Where the workers' utilization falls below :data:`UTILIZATION` for ``mean``: as
    simulated (or extrapolated as in :func:`crossed_at`), and N = capacity x mean /
    UTILIZATION from the saturated master's measured capacity."""
    parts = []
    found = crossed_at(experiment, strategy, mean, held_back)
    if found is not None:
        parts.append(found if "extrapolated" in found else f"{found} (simulated)")
    capacity = experiment.capacity(strategy)
    if capacity is not None:
        x, run = capacity
        parts.append(f"≈ {_n(x * mean / UTILIZATION)} from the capacity, {x:,.0f} trials/s "
                     f"(measured at {run.workers:,} workers, {run.figures.trials:,} trials)")
    if parts:
        return "; ".join(parts)
    largest = max((r.workers for r in experiment.of(strategy, mean)), default=0)
    return f"beyond {largest:,}" if largest else "not simulated"


def fit_growth(growth: list[tuple[int, float]]) -> tuple[float, float] | None:
    """Least squares ``seconds per trial = a + b * study size`` (None: too few points)."""
    if len(growth) < 3:
        return None
    sizes, costs = np.array(growth, dtype=float).T
    b, a = np.polyfit(sizes, costs, 1)
    return float(a), float(b)


def print_runs(runs: list[Run]) -> None:
    print("| strategy | mean trial | workers | trials | worker utilization | master busy "
          "| master ms / trial | of which commit | reports / pass | tuple server load "
          "| simulation took |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in sorted(runs, key=lambda r: (r.strategy, r.mean, r.workers, r.figures.trials)):
        f = r.figures
        print(f"| {r.strategy} | {r.mean:g} s | {f.workers:,} | {f.trials:,} | "
              f"{_pct(f.utilization)} | {_pct(f.master_busy)} | {1e3 * f.master_s_per_trial:.3f} "
              f"| {1e3 * r.commit_s / f.trials:.3f} | {f.reports_per_pass:.1f} "
              f"| {_pct(f.server_load)} | {r.wall_s:.1f} s |")


def print_saturation(experiment: Experiment, strategies: list[str]) -> None:
    print("| strategy | mean trial | master busy ≥ 90% at N | worker utilization < 90% at N |")
    print("|---|---:|---|---|")
    for strategy in strategies:
        for mean in experiment.args.means:
            print(f"| {strategy} | {mean:g} s | {busy_at(experiment, strategy, mean)} "
                  f"| {held_back_at(experiment, strategy, mean)} |")


def print_growth(experiment: Experiment, strategy: str) -> None:
    """The master's cost per trial as the study grows (from the run with the fewest
    workers: one proposal per pass), its fitted line, and the N at which one master is
    busy 90% of the time for studies of :data:`SIZES` trials, from that line."""
    runs = experiment.of(strategy)
    if not runs:
        return
    run = runs[0]
    line = fit_growth(run.growth)
    print(f"{strategy}: master ms per trial as the study grows ({run.workers:,} workers, "
          f"mean {run.mean:g} s)")
    print("| study size | " + " | ".join(f"{size:,}" for size, _ in run.growth) + " |")
    print("|---|" + "---:|" * len(run.growth))
    print("| ms / trial | " + " | ".join(f"{1e3 * cost:.2f}" for _, cost in run.growth) + " |")
    if line is None or strategy == "random":   # random: flat; its saturation is simulated
        return
    a, b = line
    print(f"\nfit: {1e3 * a:.3f} ms + {1e6 * b:.3f} µs x study size; master busy ≥ 90% at N "
          f"≈ 0.9 x mean / cost(study size), extrapolated past {run.figures.trials:,} trials "
          f"(workers' utilization < 90% at 1/0.81 = 1.23 times these N):")
    means = experiment.args.means
    print("| study size | ms / trial | " + " | ".join(f"N, mean {m:g} s" for m in means) + " |")
    print("|---:|---:|" + "---:|" * len(means))
    for size in SIZES:
        cost = a + b * size
        print(f"| {size:,} | {1e3 * cost:.1f} | " +
              " | ".join(_n(BUSY * m / cost) for m in means) + " |")
    per_worker = 1 + run.queued
    print(f"\nthe first pass proposes {per_worker} trial(s) a worker (its prefetch: "
          f"{run.queued}) before it puts any task; from the fit, the workers' first tasks wait:")
    print("| workers | " + " | ".join(f"{n:,}" for n in experiment.args.workers) + " |")
    print("|---|" + "---:|" * len(experiment.args.workers))
    print("| first pass | " + " | ".join(_duration(first_pass(a, b, per_worker * n))
                                         for n in experiment.args.workers) + " |")


def first_pass(a: float, b: float, proposals: int) -> float:
    """Seconds to propose ``proposals`` trials into an empty study when the n-th costs
    ``a + b * n`` (the fitted line)."""
    return a * proposals + b * proposals * (proposals - 1) / 2


def _prefetch(text: str) -> int | str:
    if text == "auto":
        return text
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected auto or a whole number >= 0; got {text!r}")
    return int(text)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="a smoke test: 10 and 100 workers, 1 and 60 s, small studies")
    parser.add_argument("--strategies", nargs="+", default=["random", "tpe"])
    parser.add_argument("--workers", nargs="+", type=int, default=[10, 100, 1000, 10000])
    parser.add_argument("--means", nargs="+", type=float, default=[1.0, 60.0, 600.0],
                        help="mean trial durations, simulated seconds")
    parser.add_argument("--sigma", type=float, default=0.5,
                        help="spread of the log-normal trial durations (in log space)")
    parser.add_argument("--waves", type=int, default=4, help="trials per worker in a run")
    parser.add_argument("--saturated-waves", type=int, default=8,
                        help="trials per worker in the longer run of a saturated random search")
    parser.add_argument("--min-trials", type=int, default=500)
    parser.add_argument("--max-trials", type=int, default=80_000,
                        help="the most trials one random-search run simulates")
    parser.add_argument("--tpe-trials", type=int, default=1000,
                        help="study size of a model-based run (its proposals cost more as it grows)")
    parser.add_argument("--refine", type=int, default=3,
                        help="bisection steps for each saturation point")
    parser.add_argument("--epochs", type=int, default=0, help="epoch reports per trial")
    parser.add_argument("--rtt-us", type=float, default=None,
                        help="tuple-space round trip in µs (e.g. tuplespace_bench.py's ping-pong); "
                             "default: measured in-process")
    parser.add_argument("--database", default=None,
                        help="a SQLAlchemy URL of an existing database to write the studies to "
                             "(e.g. PostgreSQL); default: a SQLite file in a temporary folder")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu",
                        help="what times the master's work: cpu (its process CPU time, steady on "
                             "a shared machine) or wall (elapsed time: includes waiting for a "
                             "database server)")
    parser.add_argument("--prefetch", type=_prefetch, default=None,
                        help="the master's prefetch setting; default: what auto picks for trials "
                             "longer than a master pass (0 for tpe, which learns from results, "
                             "1 for random); auto itself sizes the queue from the master's elapsed "
                             "time per pass, which here includes the simulation's own work")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if args.quick:
        args.workers, args.means, args.tpe_trials, args.refine = [10, 100], [1.0, 60.0], 300, 1
        args.max_trials = 5000
    if min(args.workers) < 1 or min(args.means) <= 0 or min(args.waves, args.saturated_waves) < 1 \
            or args.sigma < 0 or args.epochs < 0:
        parser.error("--workers, --means, --waves and --saturated-waves must be positive, "
                     "--sigma and --epochs not negative")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    started = time.perf_counter()
    strategies = available(args.strategies)
    for name in args.strategies:
        if name not in strategies:
            print(f"note: this diel has no strategy {name!r}; skipped", file=sys.stderr)
    with tempfile.TemporaryDirectory() as scratch:
        task = SimStudy("random", 1, 1, scratch, 1.0).example_task()
    messages = measure_messages(task)
    if args.rtt_us is not None:
        messages = Messages(messages.put_s, args.rtt_us * 1e-6, messages.server_s)
    print(f"tuple-space messages: tput {1e6 * messages.put_s:.1f} µs of the caller's CPU, "
          f"round trip {1e6 * messages.rtt_s:.1f} µs{' (given)' if args.rtt_us else ''}, "
          f"server {1e6 * messages.server_s:.1f} µs of CPU per request\n")
    experiment = Experiment(args, messages)
    for strategy in strategies:
        for mean in args.means:
            for workers in experiment.sizes(strategy):
                if experiment.run(strategy, workers, mean) is None:
                    print(f"  {strategy} mean {mean:g} s, {workers:,} workers: not simulated "
                          f"(a study of {args.tpe_trials:,} trials is under {args.waves} per "
                          "worker)", file=sys.stderr)
            experiment.refine(strategy, mean)
            if strategy == "random":
                experiment.run_longer(strategy, mean)
    print_runs(experiment.runs)
    print()
    print_saturation(experiment, strategies)
    for strategy in strategies:
        print()
        print_growth(experiment, strategy)
    print(f"\n(simulated in {time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
