"""Data-parallel trials and large-batch training, measured in one run.

    python benchmarks/parallel_bench.py [--epochs 3] [--date-epochs 12] [--skip-scaling]

(a) strong scaling of one trial over 1, 2 and 4 ranks: this script launches itself under
    ``mpiexec -n K`` for each K and prints time per epoch, speedup, efficiency and the
    share of the step spent in the gradient Allreduce (rank 0; it includes waiting for
    the slowest rank). Each rank gets ``cores // K`` BLAS threads (at least 1), so on a
    machine with fewer cores than ranks the ranks share cores and efficiency is bounded.
(b) DATE against linear scaling with a constant warm-up at B0, 4*B0 and 16*B0 on the
    shipped MNIST subset (4,000 / 1,000), final test accuracy of each, plus the plain B0
    baseline (constant learning rate).
(c) with a GPU (CuPy and a device): peak device memory held by CuPy's pool and time per
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
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from trainer import NeuralNetwork, build_mlp, build_model, load_mnist5k, prepare, split  # noqa: E402
from trainer.backend import cupy_or_none  # noqa: E402

HIDDEN = [528, 528, 528]


def mnist():
    """The MNIST subset split 4,000 / 1,000."""
    return split(*prepare(*load_mnist5k()))


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
    share = (model.allreduce_seconds - before) / result.time
    if comm.rank == 0:
        print(json.dumps({"ranks": comm.size, "epoch_times": [h.time for h in result.history],
                          "allreduce_share": share, "transport": model.reducer.transport if model.reducer else "-",
                          "loss": result.loss}))


def strong_scaling(epochs: int, batch_size: int) -> None:
    """Launch the worker at 1, 2 and 4 ranks and print the table."""
    mpiexec = Path(sys.executable).parent / "mpiexec"
    cores = os.cpu_count() or 1
    print(f"(a) strong scaling: MLP 784-{'-'.join(map(str, HIDDEN))}-10, global batch {batch_size}, "
          f"{epochs} timed epochs over 4,000 samples, {cores} cores on this machine")
    print(f"{'ranks':>5} {'threads':>7} {'s/epoch':>8} {'speedup':>8} {'efficiency':>10} {'allreduce':>9}  transport")
    base = None
    for ranks in (1, 2, 4):
        threads = max(1, cores // ranks)
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "OPENBLAS_NUM_THREADS": str(threads)}
        done = subprocess.run([str(mpiexec), "-n", str(ranks), sys.executable, __file__, "--worker",
                               "--epochs", str(epochs), "--batch-size", str(batch_size)],
                              capture_output=True, text=True, timeout=600, env=env, cwd=REPO)
        if done.returncode != 0:
            print(f"{ranks:>5} failed: {done.stderr.strip()[-500:]}")
            continue
        row = json.loads(done.stdout.strip().splitlines()[-1])
        per_epoch = statistics.median(row["epoch_times"])
        base = base or per_epoch
        speedup = base / per_epoch
        print(f"{ranks:>5} {threads:>7} {per_epoch:8.3f} {speedup:7.2f}x {speedup / ranks:9.0%} "
              f"{row['allreduce_share']:8.1%}  {row['transport']}")
    if cores < 4:
        print(f"   note: {cores} cores shared by up to 4 ranks (and by anything else running), so "
              f"efficiency beyond {cores} ranks is bounded by {cores}/ranks")


# -- (b) DATE against linear scaling --------------------------------------------------------
def large_batch(epochs: int, base_batch: int, base_lr: float) -> None:
    """Final test accuracy of DATE and linear scaling at B0, 4*B0 and 16*B0."""
    x_train, y_train, x_test, y_test = mnist()
    common = {"hidden": [256, 256], "learning_rate": base_lr, "momentum": 0.9, "epochs": epochs}

    def accuracy(settings: dict) -> tuple[float, float]:
        start = time.perf_counter()
        model = build_model({**common, **settings})
        result = model.fit(x_train, y_train, validation=(x_test, y_test))
        return result.val_accuracy, time.perf_counter() - start

    print(f"\n(b) large batches: MLP 784-256-256-10, SGD momentum 0.9, base lr {base_lr} at B0 = {base_batch}, "
          f"{epochs} epochs, MNIST subset 4,000 / 1,000")
    baseline, seconds = accuracy({"batch_size": base_batch})
    print(f"   baseline B0 = {base_batch}, constant lr {base_lr}: {baseline:.1%} ({seconds:.1f} s)")
    print(f"{'batch':>7} {'linear + const warm-up':>23} {'DATE':>8} {'DATE - baseline':>16}")
    for k in (1, 4, 16):
        batch = base_batch * k
        linear, _ = accuracy({"batch_size": batch, "schedule": "linear", "base_batch_size": base_batch,
                              "warmup_epochs": 1.0})
        date, _ = accuracy({"batch_size": batch, "schedule": "date", "base_batch_size": base_batch,
                            "warmup_epochs": 0.05})
        print(f"{batch:>7} {linear:>23.1%} {date:>8.1%} {100 * (date - baseline):>+14.1f} pt")


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=3, help="timed epochs per scaling run")
    parser.add_argument("--batch-size", type=int, default=200, help="global batch of the scaling runs")
    parser.add_argument("--date-epochs", type=int, default=12, help="epochs of each large-batch run")
    parser.add_argument("--base-batch", type=int, default=32, help="B0 of the large-batch runs")
    parser.add_argument("--base-lr", type=float, default=0.05, help="learning rate at B0")
    parser.add_argument("--skip-scaling", action="store_true", help="skip part (a)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        scaling_worker(args.epochs, args.batch_size)
        return
    if not args.skip_scaling:
        strong_scaling(args.epochs, args.batch_size)
    large_batch(args.date_epochs, args.base_batch, args.base_lr)
    offload()


if __name__ == "__main__":
    main()
