"""ASHA benchmark: examples/pytorch's search under diel's successive halving and under
Ray Tune's ``ASHAScheduler``.

Run from the repository root (it launches ``mpiexec`` and the peer itself)::

    python benchmarks/asha_bench.py --ray-python /work/bench-venv/bin/python
    python benchmarks/asha_bench.py --quick          # one short run each, to try it

The search is examples/pytorch/search.yaml's: a grid of 6 trials (``channels`` 8, 4 x
``lr`` 0.1, 0.01, 0.001) of its CNN on the shipped MNIST subset, 4 epochs each, on 2
workers, pruned by asynchronous successive halving with rungs at epochs 1 and 2
(``min_epochs: 1, eta: 2``; diel's halving, which takes no ``max_epochs``, has a rung at
4 too, where a trial not among the top is recorded ``pruned`` after its last epoch: it
changes a label, not the epochs trained; Ray's rungs stop below ``max_t``). diel runs
the example's own file (``mpiexec -n 4 python -m diel run``, in-process trials as in
search.yaml); Ray Tune runs the same ``objective`` of train.py (benchmarks/peers/
ray_asha.py, in a separate virtual environment: ``pip install 'ray[tune]==2.60.0'
torch==2.13.0 numpy``; never a diel dependency) with ``ASHAScheduler(grace_period=1,
reduction_factor=2, max_t=4)``, 2 trials at once on ``ray.init(num_cpus=2)``, the trials
in diel's grid order. The two schedulers differ in one rule: Ray keeps a trial at a rung
when its score is at least the rung's ``1 - 1/eta`` quantile (the median here, so 2 of 3
go on), diel when it is among the top ``max(1, n // eta)`` (1 of 3).

Figures, each the median of 3 repetitions (benchmarks/timing.py; the systems alternate,
and which goes first alternates too): **launch to exit** of the whole command; the
**best accuracy** of the trials that trained every epoch; the **epochs trained**, summed
over the trials (a trial stopped at a rung trained exactly that rung's epochs: diel's
prune takes effect at the rung's report, as Ray's does). ``--quick``: one repetition of
a grid of 4 trials of 2 epochs (rung 1). The table is printed as markdown; progress goes
to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import textwrap
from pathlib import Path

import diel.results
from diel.executive.command import find_mpiexec as mpiexec

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
from timing import RAY_VERSION, REPEATS, compile_sources, launch_to_exit, median_figures, \
    ray_missing  # noqa: E402

EXAMPLE = REPO / "examples" / "pytorch"
TIMEOUT = 600


def grid(quick: bool) -> tuple[dict[str, list], int]:
    """The searched values and the epochs of each trial."""
    if quick:
        return {"channels": [4], "lr": [0.1, 0.01, 0.001, 0.0001]}, 2
    return {"channels": [8, 4], "lr": [0.1, 0.01, 0.001]}, 4


def points(space: dict[str, list]) -> list[dict]:
    """The grid's parameter sets in diel's order (the last parameter varies fastest)."""
    sets = [{}]
    for name, values in space.items():
        sets = [{**s, name: v} for s in sets for v in values]
    return sets


def diel_workflow(folder: Path, space: dict[str, list], epochs: int) -> Path:
    """examples/pytorch/search.yaml with ``space`` and ``epochs`` (the same file at full
    size), its database in ``folder``."""
    text = (EXAMPLE / "search.yaml").read_text()
    space_lines = "".join(f"        {name}: {{values: {values}}}\n"
                          for name, values in space.items())
    start = text.index("      space:")
    end = text.index("      objective:")
    text = text[:start] + "      space:\n" + space_lines + text[end:]
    text = text.replace("params: {epochs: 4,", f"params: {{epochs: {epochs},")
    text = text.replace("run: train.py:objective", f"run: {EXAMPLE / 'train.py'}:objective")
    text = text.replace("      workers: train\n",
                        f"      workers: train\n      database: {folder / 'asha.db'}\n"
                        "      progress_interval: 3600\n")
    path = folder / "search.yaml"
    path.write_text(text)
    return path


def run_diel(folder: Path, space: dict[str, list], epochs: int) -> dict[str, float]:
    folder.mkdir(parents=True)
    path = diel_workflow(folder, space, epochs)
    seconds, done = launch_to_exit([mpiexec(), "-n", "4", sys.executable, "-m", "diel",
                                    "run", str(path)], REPO, os.environ, TIMEOUT)
    if done.returncode != 0:
        raise SystemExit(f"asha_bench: diel failed:\n{done.stderr[-3000:]}")
    with diel.results.open(folder / "asha.db") as results:
        rows = results.trials()
    complete = [r["accuracy"] for r in rows if r["status"] == "ok" and r["epoch"] == epochs]
    return {"seconds": seconds, "best": max(complete),
            "epochs": sum(r["epoch"] or 0 for r in rows)}


def run_ray(ray_python: str, folder: Path, space: dict[str, list], epochs: int) -> dict[str, float]:
    folder.mkdir(parents=True)
    (folder / "points.json").write_text(json.dumps(points(space)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLE), str(REPO)])}
    argv = [ray_python, str(REPO / "benchmarks" / "peers" / "ray_asha.py"),
            "--points", str(folder / "points.json"), "--epochs", str(epochs),
            "--concurrency", "2", "--grace", "1", "--eta", "2", "--dir", str(folder / "ray"),
            "--out", str(folder / "out.json")]
    seconds, done = launch_to_exit(argv, REPO, env, TIMEOUT)
    if done.returncode != 0:
        raise SystemExit(f"asha_bench: the Ray Tune peer failed:\n{done.stderr[-3000:]}")
    out = json.loads((folder / "out.json").read_text())
    return {"seconds": seconds, "best": out["best_accuracy"], "epochs": out["epochs"]}



def progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ray-python", help="a Python with ray[tune]==2.60.0 and torch (the peer)")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()),
                        help="where the runs' databases and Ray's storage go")
    parser.add_argument("--quick", action="store_true",
                        help="one repetition of a smaller grid (4 trials of 2 epochs)")
    args = parser.parse_args()
    compile_sources(REPO)
    space, epochs = grid(args.quick)
    repeats = 1 if args.quick else REPEATS
    note = ray_missing(args.ray_python, with_torch=True)
    note = note and f"not measured: {note}"
    root = Path(tempfile.mkdtemp(prefix="asha-bench-", dir=args.dir))
    runs: dict[str, list[dict[str, float]]] = {"diel": [], "Ray Tune": []}
    for rep in range(repeats):
        order = ["diel", "Ray Tune"] if rep % 2 == 0 else ["Ray Tune", "diel"]
        for system in order:
            if system == "Ray Tune" and note is not None:
                continue
            folder = root / f"{system.replace(' ', '-')}-{rep}"
            runs[system].append(run_diel(folder, space, epochs) if system == "diel" else
                                run_ray(args.ray_python, folder, space, epochs))
            progress(f"repetition {rep + 1}/{repeats}: {system}: {runs[system][-1]}")
    trials = len(points(space))
    print(f"examples/pytorch, {trials} trials of {epochs} epochs on 2 workers, successive "
          f"halving (rungs 1{', 2' if epochs > 2 else ''}; eta 2); median of {repeats}:\n")
    print("| system | launch to exit | best accuracy | epochs trained |")
    print("|---|---:|---:|---:|")
    for system, figures in runs.items():
        if figures:
            m = median_figures(figures)
            print(f"| {system} | {m['seconds']:.1f} s | {m['best']:.4f} | {m['epochs']:g} |")
    if note is not None:
        print(f"\nRay Tune {RAY_VERSION}: {note}.")
    elif runs["Ray Tune"]:
        ours, theirs = median_figures(runs["diel"]), median_figures(runs["Ray Tune"])
        print(textwrap.dedent(f"""
            diel trains {'no more' if ours['epochs'] <= theirs['epochs'] else 'MORE'} epochs
            than Ray Tune ({ours['epochs']:g} against {theirs['epochs']:g}) and is
            {theirs['seconds'] / ours['seconds']:.1f}x {'faster' if ours['seconds'] <
            theirs['seconds'] else 'SLOWER'} from launch to exit.""").replace("\n", " ").strip())


if __name__ == "__main__":
    main()
