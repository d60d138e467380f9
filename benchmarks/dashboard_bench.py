"""Dashboard benchmark: page load on a 10,000-trial study, and the search's dispatch rate
with the dashboard open against without.

Run from the repository root (it starts ``diel dashboard``, headless Chromium and
``mpiexec`` itself; needs the dashboard and test extras and Debian's ``chromium`` and
``chromium-driver``)::

    python benchmarks/dashboard_bench.py                      # both parts
    python benchmarks/dashboard_bench.py --part load --study-trials 10000
    python benchmarks/dashboard_bench.py --part dispatch --trials 20000 --workers 4

(a) **page load**: a study of ``--study-trials`` finished trials (three parameters, three
epoch reports each, four worker copies) is written through diel's own storage API. The
page is opened at that study and timed from navigation start to the first trial table
and the first plot (the history plot, the page's default) drawn: the later of the
page's own ``performance.mark`` s ``diel:table`` and ``diel:plot``. *First visit*: a
``diel dashboard`` process started just before (as a person starts it, then opens the
address it prints, token and all: the redirect that keeps the token in a cookie is part
of the time; its start prepares the plot a first visit asks for) and a fresh browser
profile (nothing cached: the browser loads and compiles Plotly's JavaScript); *reload*:
the same page loaded again in a browser that has it (and the cookie). Median of 3;
target 2 s.

(b) **dispatch**: ``--trials`` no-op trials of a random search on ``--workers`` workers,
run as benchmarks/search_bench.py runs diel's (its workflow and its mpiexec), writing a
new study into a copy of the database of (a). *Without*: nothing else runs. *With*: a
``diel dashboard`` of that database and a headless Chromium showing the running study,
polling it as a person's open page does, both started before the search. Both windows of
benchmarks/timing.py (launch to exit; steady state 10-90%), median of 3, run in turns;
target: with the dashboard open, within 5% of without. As a machine shared with other
work makes that comparison noisy, the CPU time the dashboard's server and the browser
(their whole process trees, from /proc: Linux) used while the search ran is printed too,
as a share of all the CPU time the machine spent meanwhile.

The tables are printed as markdown, in the README's format; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import datetime, timedelta, timezone
from pathlib import Path

import diel.results
from diel.results import EpochRecord, ResultRecord, TrialStart, get_storage

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))

from search_bench import ENV, HERE, TIMEOUT_S, WORKFLOW, at_least, mpiexec, progress, \
    verdict, version  # noqa: E402
from timing import REPEATS, launch_to_exit, median_figures, steady_rate  # noqa: E402

from tests.helpers.browser import chrome, find_browser, serving  # noqa: E402

LOAD_TARGET_S = 2.0
DISPATCH_TARGET = 0.05        # the search's rate with the dashboard open: within 5%
STUDY = "big"
SPACE = {"lr": {"loguniform": [1e-4, 1e-1]}, "act": {"choice": ["relu", "tanh"]},
         "layers": {"int": [1, 4]}}
# the page's marks (dashboard.js), in ms from navigation start
MARKS = ("table", "plot", "plotly", "plot-data")
READ_MARKS = f"return {list(MARKS)}.map(n => performance.getEntriesByName('diel:' + n)[0])" \
             ".map(m => m ? m.startTime : null)"


def build_study(path: Path, trials: int, seed: int = 1) -> None:
    """Write a finished random-search study of ``trials`` trials to the SQLite file
    ``path`` through diel's storage API, 1,000 trials a transaction."""
    rng = random.Random(seed)
    store = get_storage(f"sqlite:///{path}")
    try:
        state = store.open_study(STUDY, "random", "accuracy", "maximize",
                                 {"space": SPACE, "workers": "worker", "seed": seed})
        begin = datetime.now(timezone.utc)
        for low in range(0, trials, 1000):
            numbers = range(low, min(trials, low + 1000))
            params = {n: {"lr": 10 ** rng.uniform(-4, -1), "act": rng.choice(["relu", "tanh"]),
                          "layers": rng.randint(1, 4)} for n in numbers}
            store.record(state.study_id, starts=[TrialStart(n, params[n], f"k{n}")
                                                 for n in numbers])
            accuracy = {n: rng.random() for n in numbers}
            store.record(state.study_id, epochs=[
                EpochRecord(n, e, {"accuracy": accuracy[n] * e / 3, "loss": 1 - accuracy[n] * e / 3},
                            worker=n % 4) for n in numbers for e in (1, 2, 3)], results=[
                ResultRecord(n, "pruned" if n % 10 == 9 else "ok", accuracy[n],
                             time=rng.uniform(1, 5), accuracy=accuracy[n],
                             loss=1 - accuracy[n], worker=n % 4, epoch=3,
                             finished_at=begin + timedelta(milliseconds=10 * n))
                for n in numbers])
    finally:
        store.close()


def _browser() -> tuple[str, str]:
    chromium, driver, missing = find_browser()
    if missing:
        sys.exit("dashboard_bench needs " + "; ".join(missing))
    return chromium, driver   # type: ignore[return-value]


def _loaded(driver, timeout: float = 120) -> dict[str, float]:
    """Seconds from navigation start until the page drew its first table and plot
    (``load``), and to each of its marks."""
    give_up = time.monotonic() + timeout
    while True:
        found = dict(zip(MARKS, driver.execute_script(READ_MARKS)))
        if None not in found.values():
            seconds = {name: ms / 1000 for name, ms in found.items()}
            return {"load": max(seconds["table"], seconds["plot"]), **seconds}
        if time.monotonic() > give_up:
            sys.exit(f"the page drew no table and plot in {timeout} s")
        time.sleep(0.05)


def page_load(db: Path, repeats: int, screenshot: Path | None) -> dict[str, dict[str, float]]:
    """Median seconds to the first table and plot, and to each mark: first visits and
    reloads."""
    chromium, chromedriver = _browser()
    first: list[dict[str, float]] = []
    for rep in range(repeats):
        with serving(db) as (url, _):
            driver = chrome(chromium, chromedriver)
            try:
                driver.get(f"{url}#study={STUDY}")
                first.append(_loaded(driver))
                if screenshot is not None and rep == 0:
                    driver.save_screenshot(str(screenshot))
            finally:
                driver.quit()
        progress(f"  page load, first visit {rep + 1}/{repeats}: {_marks(first[-1])}")
    again: list[dict[str, float]] = []
    with serving(db) as (url, _):
        driver = chrome(chromium, chromedriver)
        try:
            driver.get(f"{url}#study={STUDY}")
            _loaded(driver)
            for rep in range(repeats):
                driver.refresh()
                again.append(_loaded(driver))
                progress(f"  page load, reload {rep + 1}/{repeats}: {_marks(again[-1])}")
        finally:
            driver.quit()
    return {"first": median_figures(first), "reload": median_figures(again)}


def _marks(seconds: dict[str, float]) -> str:
    return (f"{seconds['load']:.2f} s (table {seconds['table']:.2f} s, plot data "
            f"{seconds['plot-data']:.2f} s, Plotly ready {seconds['plotly']:.2f} s, plot "
            f"{seconds['plot']:.2f} s)")


def run_search(db: Path, trials: int, workers: int, watched: bool) -> dict[str, float]:
    """One ``mpiexec ... diel run`` of search_bench's workflow writing study 'bench'
    into a copy of ``db``, with (``watched``) or without a dashboard and a browser open
    on it: launch-to-exit seconds and steady-state trials/s."""
    with tempfile.TemporaryDirectory(prefix="dashboard-bench-") as tmp, ExitStack() as stack:
        shutil.copy(db, Path(tmp) / "bench.db")   # the workflow's default database
        workflow = Path(tmp) / "bench.yaml"
        workflow.write_text(WORKFLOW.format(trials=trials, workers=workers, sleep=0.0,
                                            isolate="true"))
        roots: dict[str, int] = {}
        if watched:
            url, roots["server"] = stack.enter_context(serving(Path(tmp) / "bench.db"))
            chromium, chromedriver = _browser()
            driver = chrome(chromium, chromedriver)
            stack.callback(driver.quit)
            roots["browser"] = driver.service.process.pid   # chromedriver, Chromium below it
            driver.get(f"{url}#study=bench")   # 'waiting for study bench' until it starts
            _seen(driver, STUDY)
        argv = [mpiexec(), "-n", str(workers + 2), sys.executable, "-m", "diel", "run",
                str(workflow)]
        before = {name: cpu_seconds(pid) for name, pid in roots.items()}
        busy = machine_busy_s()
        wall, done = launch_to_exit(argv, HERE, ENV, TIMEOUT_S)
        busy = machine_busy_s() - busy
        used = {f"{name}_cpu": cpu_seconds(pid) - before[name] for name, pid in roots.items()}
        if done.returncode != 0:
            sys.exit(f"diel run failed ({done.returncode}):\n{done.stderr[-3000:]}")
        if watched:
            _seen(driver, "bench")
        with diel.results.open(Path(tmp) / "bench.db") as results:
            rows = results.trials(study="bench", status="ok")
    if len(rows) != trials:
        sys.exit(f"diel recorded {len(rows)} ok trials, expected {trials}")
    ends = [datetime.fromisoformat(row["finished_at"]).timestamp() for row in rows]
    figures = {"launch": wall, "steady": steady_rate(ends), **used}
    if used:
        figures["share"] = sum(used.values()) / busy   # of all CPU time spent meanwhile
    return figures


_TICK = os.sysconf("SC_CLK_TCK")


def _stats() -> dict[int, tuple[int, float]]:
    """Every process's parent and CPU seconds (user + system), from /proc."""
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue   # it ended meanwhile
            out[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK)
    return out


def cpu_seconds(root: int) -> float:
    """CPU seconds used so far by process ``root`` and its live descendants (Linux)."""
    stats = _stats()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += stats.get(pid, (0, 0.0))[1]
        todo += children.get(pid, [])
    return total


def machine_busy_s() -> float:
    """CPU seconds the whole machine has spent busy (not idle or waiting), /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / _TICK


def _seen(driver, study: str, timeout: float = 60) -> None:
    """Wait until the page lists ``study`` (the browser is really following)."""
    give_up = time.monotonic() + timeout
    script = f"return !!document.querySelector('#studies li[data-study=\"{study}\"]')"
    while not driver.execute_script(script):
        if time.monotonic() > give_up:
            sys.exit(f"the page did not list study {study} in {timeout} s")
        time.sleep(0.1)


def dispatch(db: Path, trials: int, workers: int, repeats: int) -> dict[str, dict[str, float]]:
    runs: dict[str, list[dict[str, float]]] = {"without": [], "with": []}
    for rep in range(repeats):
        for name in runs:
            figures = run_search(db, trials, workers, watched=name == "with")
            runs[name].append(figures)
            spent = (f"; dashboard {figures['server_cpu']:.2f} s CPU, browser "
                     f"{figures['browser_cpu']:.2f} s ({figures['share']:.1%} of the machine's)"
                     if "share" in figures else "")
            progress(f"  dispatch, repetition {rep + 1}/{repeats}, {name} the dashboard: "
                     f"{figures['launch']:.2f} s launch to exit, {figures['steady']:,.0f} "
                     f"trials/s steady{spent}")
    return {name: median_figures(figures) for name, figures in runs.items()}


def print_load(trials: int, figures: dict[str, dict[str, float]], repeats: int) -> None:
    print(f"**Dashboard page load**: a study of {trials:,} finished trials, from navigation "
          "start to the trial table and the history plot drawn (the page's own marks), "
          f"headless Chromium on the same machine, median of {repeats}. The other columns "
          "say when the table was drawn, the plot's data arrived, Plotly's JavaScript "
          "(served from the installed package) was ready and the plot was drawn.\n")
    print("| page load | table and plot drawn | table | plot data | Plotly ready | plot | "
          "target |")
    print("|---|---|---|---|---|---|---|")
    for key, label in (("first", "first visit (a server just started, a fresh browser)"),
                       ("reload", "reload (the browser has the page)")):
        seconds = figures[key]
        print(f"| {label} | **{seconds['load']:.2f} s** | {seconds['table']:.2f} s | "
              f"{seconds['plot-data']:.2f} s | {seconds['plotly']:.2f} s | "
              f"{seconds['plot']:.2f} s | ≤ {LOAD_TARGET_S:g} s: "
              f"{verdict(seconds['load'] <= LOAD_TARGET_S)} |")
    print()


def print_dispatch(trials: int, workers: int, study_trials: int,
                   table: dict[str, dict[str, float]], repeats: int) -> None:
    print(f"**Dispatch with the dashboard open**: {trials:,} no-op trials of a random search, "
          f"{workers} isolated workers (benchmarks/search_bench.py's workflow), writing a new "
          f"study into a database that already holds a {study_trials:,}-trial study; *with*: "
          "`diel dashboard` and a headless Chromium showing the running study, on the same "
          f"machine; median of {repeats}.\n")
    print("| window | without the dashboard | with the dashboard open | with / without | "
          "target |")
    print("|---|---|---|---|---|")
    base, watched = table["without"], table["with"]
    for key, label in (("launch", "launch to exit, trials/s"),
                       ("steady", "steady state (10-90%), trials/s")):
        ours = trials / base[key] if key == "launch" else base[key]
        theirs = trials / watched[key] if key == "launch" else watched[key]
        ratio = theirs / ours
        print(f"| {label} | {ours:,.0f} | {theirs:,.0f} | {ratio:.1%} | within "
              f"{DISPATCH_TARGET:.0%}: {verdict(ratio >= 1 - DISPATCH_TARGET)} |")
    print(f"\nWhile the search ran, the dashboard's server used {watched['server_cpu']:.2f} CPU "
          f"seconds and the browser {watched['browser_cpu']:.2f}: {watched['share']:.1%} of all "
          "the CPU time the machine spent meanwhile (medians).\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("load", "dispatch", "both"), default="both")
    parser.add_argument("--study-trials", type=at_least(10), default=10_000,
                        help="trials of the study the page shows (default 10000)")
    parser.add_argument("--trials", type=at_least(10), default=20_000,
                        help="no-op trials of the search in (b) (default 20000)")
    parser.add_argument("--workers", type=at_least(1), default=4, help="worker copies in (b)")
    parser.add_argument("--repeats", type=at_least(1), default=REPEATS,
                        help=f"repetitions per figure, the median is reported (default {REPEATS})")
    parser.add_argument("--screenshot", type=Path,
                        help="save a screenshot of the first page load of (a) here")
    args = parser.parse_args()
    started = time.perf_counter()
    print(f"{os.cpu_count()} cores; Python {sys.version.split()[0]}, "
          f"Starlette {version('starlette')}, uvicorn {version('uvicorn')}, "
          f"Plotly {version('plotly')}, Selenium {version('selenium')}, MPICH {version('mpich')}\n")
    with tempfile.TemporaryDirectory(prefix="dashboard-study-") as tmp:
        db = Path(tmp) / "study.db"
        build_started = time.perf_counter()
        build_study(db, args.study_trials)
        progress(f"  wrote a study of {args.study_trials:,} trials in "
                 f"{time.perf_counter() - build_started:.1f} s")
        if args.part in ("load", "both"):
            print_load(args.study_trials, page_load(db, args.repeats, args.screenshot),
                       args.repeats)
        if args.part in ("dispatch", "both"):
            print_dispatch(args.trials, args.workers, args.study_trials,
                           dispatch(db, args.trials, args.workers, args.repeats), args.repeats)
    progress(f"dashboard_bench: {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
