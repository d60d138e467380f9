"""Search-quality benchmark: how good a trial each strategy finds within a fixed budget.

Run from anywhere (it launches ``mpiexec`` itself)::

    python benchmarks/search_quality.py                       # everything (~13 min, 2 cores, nothing else running)
    python benchmarks/search_quality.py --quick               # a smoke run
    python benchmarks/search_quality.py --problems branin --systems random,tpe --seeds 5

Problems (benchmarks/quality_functions.py): Branin (2-D, minimum 0.397887) and
Hartmann-6 (6-D, minimum -3.32237), minimized with 100 trials each, as worker ``run:``
functions; and a real model: the builtin ``trainer`` (its MLP, 2 epochs of SGD on the
shipped 5,000-image MNIST subset) tuned over learning rate, momentum, weight decay,
depth and width (all numeric, so that every strategy can search it: ``cmaes`` takes no
``choice``) with 30 trials, maximizing validation accuracy; its optimum is unknown, so
the best accuracy found is reported instead of a regret.

Systems: diel's strategies, each a search with 4 worker copies in ``mode: async``, run by
``mpiexec -n 6 python -m diel run`` on a generated workflow and read back with
``diel.results``; and Optuna's own ``TPESampler`` run sequentially (in-memory storage,
the same budget and seeds) in this process. For each problem and system the median and
quartiles over the seeds of the simple regret (best value found minus the known minimum)
are printed as a markdown table, with the issue's targets: diel ``tpe``'s median regret
<= 1.2x sequential Optuna TPE's and <= 0.5x diel ``random``'s, on both functions.

It also prints (a) the time one proposal takes with 1,000 finished trials in the study,
per strategy, and (b) the dispatch rate of ``tpe`` beside ``random`` on no-op trials
(the windows of benchmarks/timing.py). A strategy that diel refuses (not installed,
not accepted for a problem's space) is shown with diel's message instead of figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

#: One BLAS thread, before NumPy is imported: Optuna's trials train in this process as
#: each diel worker does in its own (many threads on a shared machine slow training ~10x).
os.environ["OMP_NUM_THREADS"] = "1"   # not inherited: the same as the diel workers

import numpy as np  # noqa: E402
import yaml  # noqa: E402

import diel.results  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from quality_functions import (BRANIN_MIN, HARTMANN6_MIN, HARTMANN6_NAMES, branin,  # noqa: E402
                               hartmann6)
from search_bench import mpiexec, verdict, version  # noqa: E402
from timing import launch_to_exit, median_figures, steady_rate  # noqa: E402

WORKERS = 4
STUDY = "quality"
DIEL_SYSTEMS = ("random", "tpe", "gp", "cmaes")
OPTUNA_TPE = "optuna-tpe"
SYSTEMS = (*DIEL_SYSTEMS, OPTUNA_TPE)
SYSTEM_TITLES = {**{name: f"diel `{name}`, {WORKERS} async workers" for name in DIEL_SYSTEMS},
                 OPTUNA_TPE: "Optuna TPE, sequential"}  # its version: the header line
SHORT_TITLES = {**{name: f"diel {name}" for name in DIEL_SYSTEMS},
                OPTUNA_TPE: "Optuna TPE (sequential)"}
#: Fixed trainer settings of the model problem: small, so that one training takes ~0.1 s.
MODEL_SETTINGS = {"epochs": 2, "batch_size": 100, "optimizer": "sgd"}


@dataclass(frozen=True)
class Problem:
    """One benchmark problem: a diel search space, how a trial is run, and its optimum
    (None when unknown: the best value itself is then reported)."""

    name: str
    title: str
    space: Mapping[str, Mapping[str, Any]]
    trials: int
    direction: str
    optimum: float | None
    worker: Mapping[str, Any]
    evaluate: Callable[[dict[str, Any]], float]
    metric: str = "objective"
    catch: tuple[type[BaseException], ...] = field(default=())


def _model_accuracy(params: dict[str, Any]) -> float:
    """The builtin trainer's objective on ``params`` over :data:`MODEL_SETTINGS`."""
    from diel.worker import Trial
    from trainer.objective import objective

    return float(objective(Trial(params={**MODEL_SETTINGS, **params}, number=0,
                                 study=STUDY))["accuracy"])


def _model_catch() -> tuple[type[BaseException], ...]:
    from trainer.errors import TrainingDiverged

    return (TrainingDiverged,)


def problems(quick: bool) -> dict[str, Problem]:
    """The three problems; ``quick`` shrinks their budgets for a smoke run."""
    function_trials, model_trials = (20, 6) if quick else (100, 30)
    functions = HERE / "quality_functions.py"
    return {
        "branin": Problem(
            "branin", "Branin", {"x1": {"uniform": [-5, 10]}, "x2": {"uniform": [0, 15]}},
            function_trials, "minimize", BRANIN_MIN,
            {"function": "worker", "settings": {"run": f"{functions}:branin_trial"}},
            lambda p: branin(p["x1"], p["x2"])),
        "hartmann6": Problem(
            "hartmann6", "Hartmann-6", {name: {"uniform": [0, 1]} for name in HARTMANN6_NAMES},
            function_trials, "minimize", HARTMANN6_MIN,
            {"function": "worker", "settings": {"run": f"{functions}:hartmann6_trial"}},
            lambda p: hartmann6([p[name] for name in HARTMANN6_NAMES])),
        "mnist": Problem(
            "mnist", "MNIST MLP", {"learning_rate": {"loguniform": [1e-3, 1.0]},
                                   "momentum": {"uniform": [0.0, 0.95]},
                                   "weight_decay": {"loguniform": [1e-6, 1e-2]},
                                   "layers": {"int": [1, 3]},
                                   "width": {"int": [16, 128]}},
            model_trials, "maximize", None,
            {"function": "trainer", "settings": dict(MODEL_SETTINGS)},
            _model_accuracy, metric="accuracy", catch=_model_catch()),
    }


class Refused(Exception):
    """diel refused a workflow (exit status 2): the strategy is not available for it."""


def _environment() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def workflow(strategy: Any, space: Mapping[str, Any], worker: Mapping[str, Any], trials: int,
             seed: int, direction: str = "maximize", objective: str = "accuracy",
             workers: int = WORKERS, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A diel workflow: a tuple space, an async search (its settings updated with
    ``extra``) and ``workers`` copies of ``worker``."""
    return {
        "modules": {
            "space": {"function": "tuplespace"},
            "search": {"function": "search", "settings": {
                "strategy": strategy, "mode": "async", "workers": "worker", "seed": seed,
                "max_trials": trials, "space": dict(space), "objective": objective,
                "direction": direction, "study": STUDY, **(extra or {})}},
            "worker": {**worker, "copies": workers},
        },
        "services": ["space"],
    }


def run_workflow(flow: Mapping[str, Any], folder: Path,
                 timeout: float = 600) -> tuple[float, list[dict[str, Any]]]:
    """Run ``flow`` with ``mpiexec`` in ``folder``: (seconds from launch to exit, every
    trial of the study). Raises :class:`Refused` when diel exits with status 2."""
    path = folder / "quality.yaml"
    path.write_text(yaml.safe_dump(dict(flow), sort_keys=False))
    ranks = 2 + flow["modules"]["worker"]["copies"]
    seconds, done = launch_to_exit([mpiexec(), "-n", str(ranks), sys.executable, "-m", "diel",
                                    "run", str(path)], folder, _environment(), timeout)
    if done.returncode == 2:
        lines = [line for line in done.stderr.splitlines() if "error" in line.lower()]
        raise Refused((lines[0] if lines else done.stderr.strip()[-300:]).replace(
            f"{path}: ", ""))
    if done.returncode != 0:
        sys.exit(f"diel run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    with diel.results.open(folder / "quality.db") as results:
        return seconds, results.trials(study=STUDY)


def best_of(problem: Problem, values: Sequence[float]) -> float:
    """The best of ``values`` in the problem's direction."""
    return min(values) if problem.direction == "minimize" else max(values)


def diel_best(problem: Problem, strategy: str, seed: int,
              extra: Mapping[str, Any] | None = None) -> float:
    """The best value a diel search with ``strategy`` (and the search settings ``extra``)
    finds on ``problem``."""
    with tempfile.TemporaryDirectory(prefix="diel-quality-") as tmp:
        flow = workflow(strategy, problem.space, problem.worker, problem.trials, seed,
                        problem.direction, "accuracy", extra=extra)
        _, rows = run_workflow(flow, Path(tmp))
    if len(rows) != problem.trials:
        sys.exit(f"diel {strategy} on {problem.name} (seed {seed}) recorded {len(rows)} "
                 f"trials, expected {problem.trials}")
    values = [row[problem.metric] for row in rows if row["status"] == "ok"]
    if not values:
        sys.exit(f"diel {strategy} on {problem.name} (seed {seed}): no trial ended ok")
    return best_of(problem, values)


def optuna_best(problem: Problem, seed: int) -> float:
    """The best value Optuna's TPESampler finds on ``problem``, sequentially, in memory."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction=problem.direction,
                                sampler=optuna.samplers.TPESampler(seed=seed))

    def objective(trial: "optuna.Trial") -> float:
        return problem.evaluate({name: _suggest(trial, name, spec)
                                 for name, spec in problem.space.items()})

    study.optimize(objective, n_trials=problem.trials, catch=problem.catch)
    values = [t.value for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    return best_of(problem, values)


def _suggest(trial: Any, name: str, spec: Mapping[str, Any]) -> Any:
    """The Optuna suggestion for one diel space entry (the kinds the problems use)."""
    (kind, value), = spec.items()
    if kind == "uniform":
        return trial.suggest_float(name, *value)
    if kind == "loguniform":
        return trial.suggest_float(name, *value, log=True)
    if kind == "int":
        return trial.suggest_int(name, *value)
    if kind == "choice":
        return trial.suggest_categorical(name, list(value))
    raise ValueError(f"no Optuna suggestion for the space kind {kind!r} of {name}")


@dataclass
class Cell:
    """One system on one problem: its best value per seed, or why it has none."""

    bests: list[float] = field(default_factory=list)
    refused: str | None = None
    seconds: float = 0.0


def measure(problem: Problem, system: str, seeds: Sequence[int],
            extra: Mapping[str, Any] | None = None) -> Cell:
    """Run ``system`` on ``problem`` once per seed (diel's with the search settings ``extra``)."""
    cell = Cell()
    started = time.perf_counter()
    for seed in seeds:
        try:
            best = optuna_best(problem, seed) if system == OPTUNA_TPE else \
                diel_best(problem, system, seed, extra)
        except Refused as refusal:
            cell.refused = str(refusal)
            break
        cell.bests.append(best - problem.optimum if problem.optimum is not None else best)
    cell.seconds = time.perf_counter() - started
    return cell


def quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    """(25%, median, 75%), linear interpolation between the sorted values."""
    if len(values) == 1:
        return values[0], values[0], values[0]
    low, median, high = statistics.quantiles(values, n=4, method="inclusive")
    return low, median, high


def table(chosen: Sequence[Problem], systems: Sequence[str],
          cells: Mapping[tuple[str, str], Cell]) -> str:
    """The results as a markdown table: a row per system, a column per problem."""
    heads = [f"{p.title}: {'regret' if p.optimum is not None else 'best accuracy'}, "
             f"{p.trials} trials" for p in chosen]
    lines = ["| system | " + " | ".join(heads) + " |", "|---" * (len(chosen) + 1) + "|"]
    for system in systems:
        row = []
        for problem in chosen:
            cell = cells[problem.name, system]
            if cell.refused is not None:
                row.append("refused (below)")
            else:
                low, median, high = quartiles(cell.bests)
                row.append(f"{median:.3g} [{low:.3g}, {high:.3g}]")
        lines.append(f"| {SYSTEM_TITLES[system]} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def ratio_interval(ours: Sequence[float], theirs: Sequence[float],
                   draws: int = 2000) -> tuple[float, float]:
    """A 90% bootstrap interval of ``median(ours) / median(theirs)``: the seeds of each
    system resampled with replacement (a fixed generator, so a run prints the same
    interval for the same figures). It says how much a met or missed target on a few
    seeds is worth."""
    rng = np.random.default_rng(0)
    mine = np.median(rng.choice(np.asarray(ours), (draws, len(ours))), axis=1)
    other = np.median(rng.choice(np.asarray(theirs), (draws, len(theirs))), axis=1)
    ratios = mine / np.where(other > 0, other, np.nan)
    low, high = np.nanpercentile(ratios, [5, 95])
    return float(low), float(high)


def targets(chosen: Sequence[Problem], cells: Mapping[tuple[str, str], Cell]) -> list[str]:
    """The issue's two ratio targets on each function whose cells were measured."""
    lines = []
    for problem in chosen:
        if problem.optimum is None:
            continue
        for other, limit in ((OPTUNA_TPE, 1.2), ("random", 0.5)):
            ours, theirs = cells.get((problem.name, "tpe")), cells.get((problem.name, other))
            if ours is None or theirs is None or ours.refused or theirs.refused:
                continue
            mine, their = statistics.median(ours.bests), statistics.median(theirs.bests)
            label = f"{problem.title}: median regret of diel tpe / {SHORT_TITLES[other]}"
            if their <= 0:
                lines.append(f"- {label}: {mine:.3g} / 0 (target <= {limit}x): "
                             f"{verdict(mine <= 0)}")
                continue
            ratio = mine / their
            spread = ""
            if min(len(ours.bests), len(theirs.bests)) > 1:
                low, high = ratio_interval(ours.bests, theirs.bests)
                spread = f", 90% bootstrap interval {low:.2f}-{high:.2f}x"
            lines.append(f"- {label} = {ratio:.2f}x (target <= {limit}x{spread}): "
                         f"{verdict(ratio <= limit)}")
    return lines


def quality(chosen: Sequence[Problem], systems: Sequence[str], seeds: Sequence[int],
            model_seeds: Sequence[int], extra: Mapping[str, Any] | None = None) -> None:
    """Run every system on every problem and print the table and the targets; diel's
    searches get the settings ``extra`` over the benchmark's."""
    cells: dict[tuple[str, str], Cell] = {}
    for problem in chosen:
        problem_seeds = model_seeds if problem.optimum is None else seeds
        for system in systems:
            cell = measure(problem, system, problem_seeds, extra)
            cells[problem.name, system] = cell
            state = "refused by diel (below)" if cell.refused else \
                f"{len(cell.bests)} seed(s) in {cell.seconds:.0f} s"
            print(f"  {problem.title} / {system}: {state}", flush=True)
    print()
    measures = []
    if any(problem.optimum is not None for problem in chosen):
        measures.append(f"simple regret (best found minus the known minimum) on the functions "
                        f"({len(seeds)} seeds)")
    if any(problem.optimum is None for problem in chosen):
        measures.append(f"best validation accuracy on the model ({len(model_seeds)} seeds; "
                        "its optimum is unknown)")
    print(f"Median [25%, 75%] over seeds: {', '.join(measures)}.")
    print()
    print(table(chosen, systems, cells))
    refusals = [(p, s, cells[p.name, s].refused) for p in chosen for s in systems
                if cells[p.name, s].refused]
    for problem, system, why in refusals:
        print(f"\n{system} on {problem.title}: refused by diel: {why}")
    lines = targets(chosen, cells)
    if lines:
        print("\nTargets (issue 11), on the functions:")
        print("\n".join(lines))


def proposal_times(strategies: Sequence[str], study_size: int, repeats: int) -> None:
    """The time of one ``propose`` per strategy, driven through diel's sampler interface
    with ``study_size`` finished Hartmann-6 trials restored (random points, their true
    values); median of ``repeats`` proposals, each told its value before the next."""
    from diel.errors import ConfigError
    from diel.search.samplers import load_sampler
    from diel.search.space import parse_space

    spec = problems(quick=False)["hartmann6"].space
    print(f"\n(a) one proposal with {study_size} finished trials in the study (Hartmann-6's "
          f"6-D space, async mode), median of {repeats}; restore = rebuilding the sampler "
          "from the stored trials")
    for name in strategies:
        path = f"modules.search.settings.strategy.{name}"
        try:
            cls = load_sampler(name, path)
            space = parse_space(spec, "space", cls.kinds, name)
            cls.check(name, space, ("minimize",), {}, path)
        except ConfigError as refusal:
            print(f"  {name:<7} refused by diel: {refusal}")
            continue
        with warnings.catch_warnings():   # QMCSampler's "experimental" note
            warnings.simplefilter("ignore")
            restore, propose = _time_sampler(cls(space, ("minimize",), 1, {}, "async"),
                                             space, study_size, repeats)
        print(f"  {name:<7} {propose * 1e3:>10.2f} ms per proposal   (restore {restore:.2f} s)",
              flush=True)


def _time_sampler(sampler: Any, space: Any, study_size: int, repeats: int) -> tuple[float, float]:
    """(seconds to restore ``study_size`` finished Hartmann-6 trials, median seconds of
    ``repeats`` proposals), each proposal told its value before the next."""
    from diel.search.samplers import Observation

    def value(params: Mapping[str, Any]) -> tuple[float]:
        return (hartmann6([params[name] for name in HARTMANN6_NAMES]),)

    stored = [Observation(number, params, "ok", value(params))
              for number in range(study_size) for params in [space.sample(1, number)]]
    started = time.perf_counter()
    sampler.restore(stored)
    restore = time.perf_counter() - started
    times = []
    for number in range(study_size, study_size + repeats):
        started = time.perf_counter()
        params = sampler.propose(number)
        times.append(time.perf_counter() - started)
        sampler.tell(number, params, value(params), "ok")
    return restore, statistics.median(times)


def dispatch_once(strategy: str, trials: int) -> dict[str, float]:
    """One search of ``trials`` no-op trials (benchmarks/search_workers.py): its trials per
    second launch to exit and in the steady state (benchmarks/timing.py)."""
    worker = {"function": "worker", "settings": {"run": f"{HERE / 'search_workers.py'}:sleeper"}}
    with tempfile.TemporaryDirectory(prefix="diel-quality-") as tmp:
        flow = workflow(strategy, {"x": {"uniform": [0, 1]}}, worker, trials, 1)
        seconds, rows = run_workflow(flow, Path(tmp))
    done = [datetime.fromisoformat(row["finished_at"]).timestamp() for row in rows
            if row["status"] == "ok"]
    if len(done) != trials:
        sys.exit(f"dispatch {strategy}: {len(done)} ok trials, expected {trials}")
    return {"launch": trials / seconds, "steady": steady_rate(done)}


def dispatch(strategies: Sequence[str], trials: int, repeats: int) -> None:
    """The dispatch rate of each strategy, median of ``repeats``; repetition 1 of every
    strategy runs before repetition 2, so a slow spell of the machine is shared."""
    print(f"\n(b) dispatch: {trials} no-op trials, {WORKERS} async workers, results in SQLite, "
          f"median of {repeats}")
    runs: dict[str, list[dict[str, float]]] = {strategy: [] for strategy in strategies}
    refused: dict[str, str] = {}
    for _ in range(repeats):
        for strategy in strategies:
            if strategy in refused:
                continue
            try:
                runs[strategy].append(dispatch_once(strategy, trials))
            except Refused as refusal:
                refused[strategy] = str(refusal)
    for strategy in strategies:
        if strategy in refused:
            print(f"  {strategy:<8} refused by diel: {refused[strategy]}")
            continue
        rates = median_figures(runs[strategy])
        print(f"  {strategy:<8} {rates['steady']:>8.0f} trials/s steady state (10-90%), "
              f"{rates['launch']:>6.0f} trials/s launch to exit")


def parse_args() -> argparse.Namespace:
    """The command line, checked, with --quick's defaults and the lists resolved."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, help="seeds per function (default 10; 1 --quick)")
    parser.add_argument("--model-seeds", type=int, help="seeds for the model (default --seeds)")
    parser.add_argument("--problems", help="comma-separated among branin, hartmann6, mnist "
                                           "(default all; --quick: branin, mnist)")
    parser.add_argument("--systems", help=f"comma-separated among {', '.join(SYSTEMS)} "
                                          "(default all; --quick: random, tpe, optuna-tpe)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a search setting (a YAML value) for every diel search of the "
                             "table, e.g. --set prefetch=0; repeatable")
    parser.add_argument("--parts", default="quality,proposal,dispatch",
                        help="comma-separated: quality (the table), proposal (a), dispatch (b)")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: small budgets, one seed, fewer problems and "
                             "systems, 100 trials in (a) and 200 in (b), no repeats")
    args = parser.parse_args()

    def listed(value: str) -> list[str]:
        return [item.strip() for item in value.split(",") if item.strip()]

    known = problems(args.quick)
    args.problems = listed(args.problems or ("branin,mnist" if args.quick else ",".join(known)))
    args.systems = listed(args.systems or ("random,tpe,optuna-tpe" if args.quick else
                                           ",".join(SYSTEMS)))
    args.parts = set(listed(args.parts))
    for name in args.problems:
        if name not in known:
            parser.error(f"--problems: unknown problem {name!r}; known: {', '.join(known)}")
    for system in args.systems:
        if system not in SYSTEMS:
            parser.error(f"--systems: unknown system {system!r}; known: {', '.join(SYSTEMS)}")
    if not args.parts <= {"quality", "proposal", "dispatch"}:
        parser.error("--parts: expected quality, proposal and/or dispatch")
    args.seeds = args.seeds if args.seeds is not None else (1 if args.quick else 10)
    args.model_seeds = args.model_seeds if args.model_seeds is not None else args.seeds
    if args.seeds < 1 or args.model_seeds < 1:
        parser.error("--seeds and --model-seeds must be at least 1")
    args.extra = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            parser.error(f"--set: expected KEY=VALUE, got {item!r}")
        args.extra[key.strip()] = yaml.safe_load(value)
    args.known = known
    return args


def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    print(f"{os.cpu_count()} cores; Python {sys.version.split()[0]}; Optuna {version('optuna')}; "
          f"{WORKERS} async workers",
          flush=True)
    if args.extra:
        print(f"diel search settings: {args.extra}")
    if "quality" in args.parts:
        quality([args.known[name] for name in args.problems], args.systems,
                range(1, args.seeds + 1), range(1, args.model_seeds + 1), args.extra)
    if "proposal" in args.parts:
        proposal_times(("random", "tpe", "gp", "cmaes", "qmc", "nsga2"),
                       100 if args.quick else 1000, 3)
    if "dispatch" in args.parts:
        dispatch(("random", "tpe"), 200 if args.quick else 1000, 1 if args.quick else 3)
    print(f"\ntotal {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
