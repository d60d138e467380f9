"""Data-parallel trials and large-batch training, measured in one run.

    python benchmarks/parallel_bench.py [--seeds 3] [--repeats 3] [--date-epochs 12] [--threads 1]
                                        [--skip-scaling]

(a) Strong scaling of one trial over 1, 2 and 4 ranks. This script launches itself under
    ``mpiexec -n K``; the timed window is rank 0's wall time of ``fit`` over ``--epochs``
    epochs that follow one untimed warm-up epoch, divided by the epochs (no MPI start-up,
    imports, data loading or validation inside it). Each K is launched ``--repeats`` times,
    the rank counts interleaved, and the table gives the median launch with the spread.
    The Allreduce share is rank 0's time inside ``Allreduce`` over the same window (it
    includes waiting for the slowest rank). Each rank gets ``cores // K`` BLAS threads
    (at least 1), so on a machine with fewer cores than ranks the ranks share cores.
(b) The constant-rate baseline at B0, linear scaling with a constant warm-up, and DATE at
    B0, 4*B0 and 16*B0 on the shipped MNIST subset. Protocol: the 4,000 training digits
    are split (stratified, fixed seed) into 3,200 to train on and 800 for validation; the
    1,000 test digits are not looked at until the end. Every choice is made on the
    validation split by the median accuracy over ``--seeds`` seeds: first the baseline's
    learning rate at B0 (which becomes both schedules' ``base_lr``), then, at each batch
    size, each schedule's configuration from a grid of the same size (linear: its warm-up;
    DATE: its warm-up and LARS trust coefficient). The selected configuration's models
    are then scored once on the test split; the table gives the median over the seeds and
    the spread. A run that diverges counts as accuracy 0. This process uses ``--threads``
    BLAS threads (1 by default).
(c) With a GPU (CuPy and a device): peak device memory held by CuPy's pool and time per
    step with and without host offload; otherwise it says it was skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from diel.executive.command import find_mpiexec  # noqa: E402
BLAS_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def parse() -> argparse.Namespace:
    """The command line; an option below 1 exits 2 with argparse's message."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=3, help="timed epochs per scaling launch")
    parser.add_argument("--repeats", type=int, default=3, help="launches per rank count in part (a)")
    parser.add_argument("--batch-size", type=int, default=200, help="global batch of the scaling runs")
    parser.add_argument("--date-epochs", type=int, default=12, help="epochs of each large-batch run")
    parser.add_argument("--base-batch", type=int, default=32, help="B0 of the large-batch runs")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per configuration in part (b)")
    parser.add_argument("--threads", type=int, default=1,
                        help="BLAS threads of this process, i.e. of part (b) (default 1: its small GEMMs "
                             "gain little from threads, and threads that outnumber free cores spin)")
    parser.add_argument("--skip-scaling", action="store_true", help="skip part (a)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    for name in ("epochs", "repeats", "batch_size", "date_epochs", "base_batch", "seeds", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    return args


ARGS = parse()
if not ARGS.worker:  # a scaling worker keeps the thread count its launcher gave it
    os.environ.update({var: str(ARGS.threads) for var in BLAS_VARIABLES})  # before NumPy loads BLAS

from trainer import (NeuralNetwork, TrainingDiverged, build_mlp, build_model, load_mnist5k,  # noqa: E402
                     prepare, split)
from trainer.backend import cupy_or_none  # noqa: E402

HIDDEN = [528, 528, 528]
#: (b): the training digits kept for fitting; the rest of the 4,000 is the validation split.
FIT_SAMPLES = 3200
VALIDATION_SEED = 1
#: (b): the grids, each of the same size (the tuning budget). Warm-ups are in epochs at B0:
#: linear keeps that many epochs at every batch size, DATE scales it by k = B / B0.
BASE_LRS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2)
LINEAR_WARMUPS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0)
DATE_WARMUPS = (0.05, 0.5)
DATE_TRUST_COEFFICIENTS = (0.03, 0.1, 0.3)
SCALES = (1, 4, 16)


def mnist():
    """The MNIST subset split 4,000 / 1,000 (train, test)."""
    return split(*prepare(*load_mnist5k()))


def spread(values: Sequence[float], fmt: str, scale: float = 1.0, unit: str = "") -> str:
    """``median<unit> (min-max)`` of ``values``, each multiplied by ``scale``, in format ``fmt``."""
    scaled = [scale * v for v in values]
    return (f"{format(statistics.median(scaled), fmt)}{unit} "
            f"({format(min(scaled), fmt)}-{format(max(scaled), fmt)})")


# -- (a) strong scaling ---------------------------------------------------------------------
def scaling_worker(epochs: int, batch_size: int) -> None:
    """Run under mpiexec: train one trial data-parallel, print rank 0's timings as JSON."""
    from mpi4py import MPI  # noqa: PLC0415 - only the scaling workers need MPI

    comm = MPI.COMM_WORLD
    x_train, y_train, _, _ = mnist()
    model = build_model({"hidden": HIDDEN, "learning_rate": 0.1, "batch_size": batch_size, "comm": comm})
    model.fit(x_train, y_train, epochs=1)  # warm-up: caches, buffers, first touches
    before = model.allreduce_seconds
    result = model.fit(x_train, y_train, epochs=epochs)
    if comm.rank == 0:
        print(json.dumps({"ranks": comm.size, "per_epoch": result.time / epochs,
                          "allreduce_share": (model.allreduce_seconds - before) / result.time,
                          "transport": model.reducer.transport if model.reducer else "-"}))


def strong_scaling(epochs: int, batch_size: int, repeats: int) -> None:
    """Launch the worker ``repeats`` times at 1, 2 and 4 ranks (interleaved); print the table."""
    mpiexec = find_mpiexec()
    cores = os.cpu_count() or 1
    print(f"(a) strong scaling: MLP 784-{'-'.join(map(str, HIDDEN))}-10, global batch {batch_size}, "
          f"4,000 samples, {cores} cores on this machine.\n"
          f"    Window: rank 0's wall time of fit() over {epochs} epochs after 1 untimed warm-up epoch, "
          f"per epoch (no start-up, imports, data loading or validation); median (min-max) of "
          f"{repeats} launches per rank count, interleaved.")
    runs: dict[int, list[dict]] = {1: [], 2: [], 4: []}
    for _ in range(repeats):
        for ranks in runs:
            threads = max(1, cores // ranks)
            env = {**os.environ, **{var: str(threads) for var in BLAS_VARIABLES}}
            done = subprocess.run([str(mpiexec), "-n", str(ranks), sys.executable, __file__, "--worker",
                                   "--epochs", str(epochs), "--batch-size", str(batch_size)],
                                  capture_output=True, text=True, timeout=600, env=env, cwd=REPO)
            if done.returncode != 0:
                print(f"   {ranks} ranks failed: {done.stderr.strip()[-500:]}")
                continue
            runs[ranks].append(json.loads(done.stdout.strip().splitlines()[-1]))
    print("| ranks | BLAS threads | s/epoch | speedup | efficiency | Allreduce share of the step "
          "| transport |")
    print("|---|---|---|---|---|---|---|")
    base = statistics.median(r["per_epoch"] for r in runs[1]) if runs[1] else None
    for ranks, rows in runs.items():
        if not rows:
            continue
        per_epoch = statistics.median(r["per_epoch"] for r in rows)
        speedup = f"{base / per_epoch:.2f}x" if base else "-"
        efficiency = f"{base / per_epoch / ranks:.0%}" if base else "-"
        share = spread([r["allreduce_share"] for r in rows], ".1f", 100, "%") if ranks > 1 else "-"
        print(f"| {ranks} | {max(1, cores // ranks)} | {spread([r['per_epoch'] for r in rows], '.3f')} | "
              f"{speedup} | {efficiency} | {share} | {rows[0]['transport']} |")
    if cores < 4:
        print(f"   note: {cores} cores shared by up to 4 ranks (and by anything else running), so "
              f"efficiency beyond {cores} ranks is bounded by {cores}/ranks")


# -- (b) DATE against linear scaling --------------------------------------------------------
@dataclass(frozen=True)
class Candidate:
    """One configuration a row may select: a label to print and the settings it adds."""

    label: str
    settings: dict[str, Any]


@dataclass
class Selected:
    """A row's selected candidate, the validation accuracy of each candidate tried (median
    over seeds), and the selected candidate's trained models (None where one diverged)."""

    candidate: Candidate
    tried: list[tuple[Candidate, float]]
    models: list[NeuralNetwork | None]


class LargeBatch:
    """Part (b): the fit, validation and test splits and the settings every run shares."""

    def __init__(self, epochs: int, seeds: int) -> None:
        x_train, y_train, self.x_test, self.y_test = mnist()
        self.x_fit, self.y_fit, self.x_val, self.y_val = split(x_train, y_train, n_train=FIT_SAMPLES,
                                                               seed=VALIDATION_SEED)
        self.common = {"hidden": [256, 256], "momentum": 0.9, "epochs": epochs}
        self.seeds = range(seeds)

    def train(self, settings: dict[str, Any], seed: int) -> NeuralNetwork | None:
        """A model trained on the fit split with ``settings``; None if training diverged."""
        model = build_model({**self.common, **settings, "seed": seed})
        try:
            model.fit(self.x_fit, self.y_fit)
        except TrainingDiverged:
            return None
        return model

    @staticmethod
    def accuracy(model: NeuralNetwork | None, x: Any, y: Any) -> float:
        """Accuracy of ``model`` on ``(x, y)``; 0 for a diverged run."""
        return 0.0 if model is None else model.evaluate(x, y)[1]

    def select(self, candidates: Sequence[Candidate], fixed: dict[str, Any]) -> Selected:
        """Train every candidate with every seed; keep the one with the best median
        validation accuracy (the first on a tie). The test split is not used."""
        tried, best, best_models = [], None, []
        for candidate in candidates:
            models = [self.train({**fixed, **candidate.settings}, seed) for seed in self.seeds]
            score = statistics.median(self.accuracy(m, self.x_val, self.y_val) for m in models)
            tried.append((candidate, score))
            if best is None or score > best[1]:
                best, best_models = (candidate, score), models
        return Selected(best[0], tried, best_models)

    def scores(self, selected: Selected) -> tuple[list[float], list[float]]:
        """The selected models' validation and test accuracies: the one look at the test split."""
        return ([self.accuracy(m, self.x_val, self.y_val) for m in selected.models],
                [self.accuracy(m, self.x_test, self.y_test) for m in selected.models])


def baseline_candidates() -> list[Candidate]:
    """The constant learning rates tried at B0."""
    return [Candidate(f"lr {lr:g}", {"learning_rate": lr}) for lr in BASE_LRS]


def linear_candidates(base_batch: int) -> list[Candidate]:
    """Linear scaling's grid: its constant warm-up (epochs, the same at every batch size)."""
    return [Candidate(f"warm-up {w:g} ep", {"schedule": "linear", "base_batch_size": base_batch,
                                            "warmup_epochs": w}) for w in LINEAR_WARMUPS]


def date_candidates(base_batch: int) -> list[Candidate]:
    """DATE's grid: warm-up (epochs at B0, scaled by k) and LARS trust coefficient."""
    return [Candidate(f"warm-up {w:g}·k ep, η {eta:g}",
                      {"schedule": "date", "base_batch_size": base_batch, "warmup_epochs": w,
                       "trust_coefficient": eta})
            for w in DATE_WARMUPS for eta in DATE_TRUST_COEFFICIENTS]


def large_batch(epochs: int, base_batch: int, seeds: int) -> None:
    """Tune on validation, score once on test: the baseline, linear scaling and DATE."""
    started = time.perf_counter()
    bench = LargeBatch(epochs, seeds)
    linear, date = linear_candidates(base_batch), date_candidates(base_batch)
    if not len(BASE_LRS) == len(linear) == len(date):
        raise SystemExit("parallel_bench: the tuning grids must have the same size")
    print(f"\n(b) large batches: MLP 784-256-256-10, SGD momentum 0.9, B0 = {base_batch}, {epochs} epochs; "
          f"MNIST subset: fit on {len(bench.x_fit):,}, select on {len(bench.x_val):,} validation digits "
          f"(carved from the 4,000 training digits, seed {VALIDATION_SEED}), score once on "
          f"{len(bench.x_test):,} test digits; {os.environ['OPENBLAS_NUM_THREADS']} BLAS thread(s).\n"
          f"    Every choice by the median validation accuracy of seeds 0-{seeds - 1}; each row tried "
          f"{len(linear)} configurations; figures: median (min-max) over the {seeds} seeds of the "
          f"selected configuration.")
    rows: list[tuple[str, str, Selected]] = []

    def tune(name: str, schedule: str, candidates: list[Candidate], fixed: dict[str, Any]) -> Selected:
        selected = bench.select(candidates, fixed)
        rows.append((name, schedule, selected))
        tried = ", ".join(f"{c.label}: {score:.1%}" for c, score in selected.tried)
        print(f"   tuning {name}, {schedule}: {tried}")
        return selected

    baseline = tune(f"{base_batch} (B0)", "constant lr (baseline)", baseline_candidates(),
                    {"batch_size": base_batch})
    base_lr = baseline.candidate.settings["learning_rate"]
    for k in SCALES:
        batch = base_batch * k
        fixed = {"batch_size": batch, "learning_rate": base_lr}
        name = f"{batch} (B0)" if k == 1 else f"{batch} ({k}·B0)"
        tune(name, f"linear, peak {base_lr * k:g}", linear, fixed)
        tune(name, f"DATE, peak {base_lr * k ** 0.5:g}", date, fixed)
    print("| batch | schedule | selected on validation | validation | test | test − baseline |")
    print("|---|---|---|---|---|---|")
    base_test, gap = None, None
    for name, schedule, selected in rows:
        val, test = bench.scores(selected)
        base_test = statistics.median(test) if base_test is None else base_test
        delta = 100 * (statistics.median(test) - base_test)
        diverged = sum(m is None for m in selected.models)
        note = f" ({diverged} of {seeds} diverged)" if diverged else ""
        versus = "-" if selected is baseline else f"{delta:+.1f} pt"
        print(f"| {name} | {schedule} | {selected.candidate.label} | {spread(val, '.1f', 100, '%')} | "
              f"{spread(test, '.1f', 100, '%')}{note} | {versus} |")
        gap = delta if schedule.startswith("DATE") else gap  # the last DATE row: the largest batch
    print(f"   target: DATE within 1 point of the B0 baseline at {SCALES[-1]}·B0 (test medians): "
          f"{'met' if gap >= -1.0 else 'missed'} ({gap:+.1f} pt). "
          f"Part (b) took {time.perf_counter() - started:.0f} s.")


# -- (c) host offload on a GPU --------------------------------------------------------------
def offload(batch_size: int = 4096, steps: int = 20) -> None:
    """Peak pool memory and step time of a deep wide MLP with and without offload."""
    cp = cupy_or_none()
    print("\n(c) host offload")
    if cp is None:
        print("   skipped: no GPU (CuPy not importable or no device visible)")
        return
    import numpy as np  # noqa: PLC0415

    x = np.random.default_rng(0).random((batch_size * 2, 1024), dtype=np.float32)
    y = np.random.default_rng(1).integers(0, 10, batch_size * 2)
    for offloaded in (False, True):
        pool = cp.get_default_memory_pool()
        pool.free_all_blocks()
        model = NeuralNetwork(build_mlp(1024, hidden=[4096] * 8), "cross_entropy", "sgd",
                              {"device": "gpu", "offload": offloaded, "gemm_dtype": "float32"})
        model.fit(x, y, epochs=1, batch_size=batch_size)
        cp.cuda.Device().synchronize()
        start = time.perf_counter()
        model.fit(x, y, epochs=steps // 2, batch_size=batch_size)
        cp.cuda.Device().synchronize()
        per_step = (time.perf_counter() - start) / steps
        print(f"   offload={offloaded!s:<5}: peak pool {pool.total_bytes() / 2**20:8.0f} MiB, "
              f"{1e3 * per_step:7.1f} ms/step")
        del model


def main(args: argparse.Namespace) -> None:
    if args.worker:
        scaling_worker(args.epochs, args.batch_size)
        return
    sys.stdout.reconfigure(line_buffering=True)  # progress shows when piped to a file
    if not args.skip_scaling:
        strong_scaling(args.epochs, args.batch_size, args.repeats)
    large_batch(args.date_epochs, args.base_batch, args.seeds)
    offload()


if __name__ == "__main__":
    main(ARGS)
