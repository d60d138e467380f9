"""Checkpoint benchmark: what a checkpoint costs a trial, and a resume, against torch.save and Ray Tune.

Run from the repository root (it launches ``mpiexec`` and the peer itself)::

    python benchmarks/checkpoint_bench.py --ray-python /work/bench-venv/bin/python
    python benchmarks/checkpoint_bench.py --quick      # sizes 1 and 10 MiB, 2 epochs a block

The state of each size (1, 10 and 100 MiB; benchmarks/checkpoint_state.py) is a model's
``state_dict`` of float32 tensors and an SGD optimizer's ``state_dict``, half each. All
files go to ``--dir`` (one disk for every system; default: the system's temporary folder).

(a) **Saving.** *diel*: what ``trial.checkpoint()`` does in the rank:
``DurableWriter.checkpoint`` (serialize, one copy of the tensors into the memory the writer
kept from an earlier checkpoint, and queue the write), as a trial that checkpoints each
epoch meets it after its first checkpoints; *blocks* is the time until it returns (the
trial trains on), *durable* until the writer's callback says the file is written,
fsynced, renamed and its folder fsynced; *blocks, writer busy* the time it blocks while
the writer still writes the trial's previous checkpoint (taken 1 ms before: a short
epoch). *torch.save + fsync*: ``torch.save`` to a
temporary file, fsync, rename, folder fsync: the same durability, all of it blocking.
*torch.save*: to the final name, no fsync (durable only once the system writes it back).
*Ray Tune*: in a trial of a real ``Tuner`` run, ``torch.save`` into a folder then
``tune.report(metrics, checkpoint=Checkpoint.from_directory(folder))``, which returns once
Ray copied the folder into the run's storage (``--dir``; Ray does not fsync it).
The peer runs with ``--ray-python`` (a separate virtual environment: ``pip install
'ray[tune]==2.60.0' torch==2.13.0 numpy``; Ray is never a diel dependency);
benchmarks/peers/ray_checkpoint.py.

(b) **Resuming**, the checkpoint's file just written (in the page cache) for every system:
*diel from memory*: ``mpiexec -n 2`` benchmarks/checkpoint_memory.py: the worker's own
resume code, with the checkpoint's copy held by a tuple server rank on the same node (a
memory file, checked when it was put): *in the rank*, the copy mapped privately from the
server's memory file (no copy), ``unpack`` and load; *isolated*, the rank hands the
file's descriptor to its child, which maps it, ``unpack``s and loads. *diel from disk*:
``read`` the file (checksum checked) and load it. *torch.load*: of the torch.save file.
*Ray Tune*: in the trial Ray restarted after a planned crash
(``FailureConfig(max_failures=1)``), ``tune.get_checkpoint()``, ``as_directory()`` and
``torch.load``. diel from memory and Ray Tune are timed until the state is loaded and
until every byte of its tensors has been read once (*touched*, ready to train:
checkpoint_state.touch, the same for both); the target is judged on *touched*.

(c) **Overhead per epoch** of examples/pytorch's model (its CNN, 8 channels, the shipped
MNIST subset, batch 64, one thread): blocks of epochs without a checkpoint and with one
after each epoch (model, optimizer and RNG states through DurableWriter.checkpoint, the write
overlapping the next epoch; the block ends when the last write is durable), alternated;
overhead = (with - without) / without, and the checkpoint call's own blocking time as a
share of an epoch.

Every figure is the median of 3 repetitions (benchmarks/timing.py), each made of one
repetition of every system in turn, so a slow spell of the shared machine does not land on
one system only; within a repetition each system saves (and resumes) once untimed first.
Markdown tables go to stdout, progress to stderr.
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
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from diel.checkpoints import DurableWriter, Written, read
from diel.executive.command import find_mpiexec

REPO = Path(__file__).resolve().parent.parent
HERE = REPO / "benchmarks"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "examples" / "pytorch"))

from checkpoint_state import make_state  # noqa: E402
from timing import REPEATS, ray_missing  # noqa: E402

TIMEOUT_S = 600
BLOCKING_TARGET = 0.10     # issue 20: blocking time <= 10% of torch.save's at 100 MB
OVERHEAD_TARGET = 0.02     # issue 20: <= 2% of epoch time when checkpointing every epoch
MEMORY_RESUME_TARGET = 5.0  # issue 20: resume from memory >= 5x faster than Ray Tune's


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def sync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- (a) saving ------------------------------------------------------------------------------
def diel_save(writer: DurableWriter, key: int, state: dict) -> tuple[dict[str, float], Written]:
    """trial.checkpoint() in the rank, DurableWriter.checkpoint, at steps 0 to 5 of trial
    ``key``: step 0 warms the writer's memory up; step 1 gives *blocks* (the writer idle)
    and *durable* (until its callback), each waited for; steps 2 and 3, then 4 and 5, are
    each taken 1 ms apart, so that the second of each pair is taken while the writer
    writes the first: the first pair warms the writer's second block up, the second gives
    *busy*. Returns those seconds, and step 1's file."""
    changed = threading.Condition()
    ended: dict[int, tuple[float, Written]] = {}
    failures: list[str] = []

    def durable(written: Written) -> None:
        with changed:
            ended[written.step] = (time.perf_counter(), written)
            changed.notify_all()

    def failed(key: int, step: int, reason: str) -> None:
        with changed:
            failures.append(reason)
            changed.notify_all()

    def checkpoint(step: int) -> float:
        started = time.perf_counter()
        writer.checkpoint(key, step, state, durable, failed)
        return time.perf_counter() - started

    def wait(step: int) -> None:
        with changed:
            changed.wait_for(lambda: step in ended or failures, TIMEOUT_S)

    checkpoint(0)
    wait(0)
    started = time.perf_counter()
    blocks = checkpoint(1)
    wait(1)
    for first in (2, 4):
        checkpoint(first)
        time.sleep(0.001)   # the writer's thread takes the write up
        busy = checkpoint(first + 1)
    writer.flush(TIMEOUT_S)
    if failures or 1 not in ended or 5 not in ended:
        raise SystemExit(f"checkpoint_bench: a diel checkpoint failed: {failures or 'timeout'}")
    return {"blocks": blocks, "durable": ended[1][0] - started, "busy": busy}, ended[1][1]


def torch_save_durable(state: dict, path: Path) -> float:
    """torch.save with diel's durability: temporary file, fsync, rename, folder fsync."""
    started = time.perf_counter()
    temporary = path.with_name(f".{path.name}.tmp")
    with open(temporary, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)
    sync_folder(path.parent)
    return time.perf_counter() - started


def torch_save_plain(state: dict, path: Path) -> float:
    started = time.perf_counter()
    torch.save(state, path)
    return time.perf_counter() - started


# -- (b) resuming ----------------------------------------------------------------------------
def diel_from_disk(written: Written) -> float:
    started = time.perf_counter()
    state = read(written.path, written.checksum).load()
    seconds = time.perf_counter() - started
    assert state["epoch"] == 1
    return seconds


def torch_load(path: Path) -> float:
    started = time.perf_counter()
    state = torch.load(path)
    seconds = time.perf_counter() - started
    assert state["epoch"] == 1
    return seconds


def diel_from_memory(sizes: list[int], folder: Path) -> dict[str, dict[int, float]]:
    out = folder / "memory.json"
    argv = [find_mpiexec(), "-n", "2", sys.executable, str(HERE / "checkpoint_memory.py"),
            "--sizes", *map(str, sizes), "--dir", str(folder / "memory"), "--out", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    if done.returncode != 0:
        raise SystemExit(f"checkpoint_bench: checkpoint_memory.py failed:\n{done.stderr[-2000:]}")
    found = json.loads(out.read_text())
    progress(f"  diel from memory: the space's reads {found.pop('reads')}")
    return {way: {int(k): v for k, v in row.items()} for way, row in found.items()}


def ray_tune(ray_python: str, sizes: list[int], folder: Path) -> dict[str, dict[int, float]]:
    out = folder / "ray.json"
    argv = [ray_python, str(HERE / "peers" / "ray_checkpoint.py"), "--sizes", *map(str, sizes),
            "--dir", str(folder / "ray"), "--out", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S)
    if done.returncode != 0:
        raise SystemExit(f"checkpoint_bench: the Ray Tune peer failed:\n{done.stderr[-2000:]}")
    return {what: {int(k): v for k, v in row.items()} for what, row in json.loads(out.read_text()).items()}



def save_and_resume(sizes: list[int], repeats: int, root: Path, ray_python: str | None,
                    ray_note: str | None) -> dict[str, dict[int, float]]:
    """Every figure of (a) and (b): {figure: {MiB: median seconds}}."""
    runs: dict[str, dict[int, list[float]]] = {}

    def keep(figure: str, mib: int, seconds: float) -> None:
        runs.setdefault(figure, {}).setdefault(mib, []).append(seconds)

    states = {mib: make_state(mib) for mib in sizes}
    for rep in range(repeats):
        folder = Path(tempfile.mkdtemp(prefix=f"rep{rep}-", dir=root))
        writer = DurableWriter(folder / "diel")
        for mib in sizes:
            state = states[mib]
            figures, written = diel_save(writer, mib, state)
            keep("diel blocks", mib, figures["blocks"])
            keep("diel blocks, writer busy", mib, figures["busy"])
            keep("diel durable", mib, figures["durable"])
            for name, save in (("torch.save + fsync", torch_save_durable), ("torch.save", torch_save_plain)):
                path = folder / "torch" / f"{mib}.pt"
                path.parent.mkdir(exist_ok=True)
                save(state, path)
                keep(name, mib, save(state, path))
            diel_from_disk(written)
            keep("diel from disk", mib, diel_from_disk(written))
            torch_load(folder / "torch" / f"{mib}.pt")
            keep("torch.load", mib, torch_load(folder / "torch" / f"{mib}.pt"))
            progress(f"  repetition {rep + 1}/{repeats}, {mib} MiB: diel blocks "
                     f"{figures['blocks'] * 1e3:.1f} ms, durable {figures['durable'] * 1e3:.1f} ms, "
                     f"blocks with the writer busy {figures['busy'] * 1e3:.1f} ms")
        writer.close()
        for way, row in diel_from_memory(sizes, folder).items():
            for mib, seconds in row.items():
                keep(f"diel from memory, {way}", mib, seconds)
        progress(f"  repetition {rep + 1}/{repeats}: diel from memory done")
        if ray_note is None:
            ray = ray_tune(ray_python, sizes, folder)
            for mib in sizes:
                keep("Ray Tune report", mib, ray["report"][mib])
                keep("Ray Tune restore", mib, ray["restore"][mib])
                keep("Ray Tune restore touched", mib, ray["restore touched"][mib])
            progress(f"  repetition {rep + 1}/{repeats}: Ray Tune done")
    return {figure: {mib: statistics.median(values) for mib, values in by_size.items()}
            for figure, by_size in runs.items()}


# -- (c) overhead per epoch ------------------------------------------------------------------
def epoch_overhead(repeats: int, epochs: int, root: Path) -> dict[str, float]:
    """Median seconds per epoch without and with a checkpoint each epoch, and the median
    blocking time of one checkpoint (module docstring, (c))."""
    import train   # examples/pytorch/train.py

    torch.set_num_threads(1)
    x_train, y_train, _, _ = train.mnist()
    torch.manual_seed(0)
    model = train.build(8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    order = torch.Generator().manual_seed(0)
    writer = DurableWriter(root / "overhead")
    steps = iter(range(1, 1 << 30))

    def epoch() -> None:
        model.train()
        for batch in torch.randperm(len(x_train), generator=order).split(64):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x_train[batch]), y_train[batch]).backward()
            optimizer.step()

    def checkpoint() -> float:
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                 "torch_rng": torch.get_rng_state(), "order_rng": order.get_state()}
        started = time.perf_counter()
        writer.checkpoint(0, next(steps), state, lambda written: None,
                          lambda key, step, reason: progress(f"  overhead: {reason}"))
        return time.perf_counter() - started

    def block(with_checkpoints: bool) -> float:
        started = time.perf_counter()
        for _ in range(epochs):
            epoch()
            if with_checkpoints:
                calls.append(checkpoint())
        writer.flush()
        return (time.perf_counter() - started) / epochs

    calls: list[float] = []
    epoch()   # warm up
    without, with_ = [], []
    for rep in range(repeats):
        without.append(block(False))
        with_.append(block(True))
        progress(f"  overhead, repetition {rep + 1}/{repeats}: {without[-1]:.3f} s an epoch "
                 f"without, {with_[-1]:.3f} s with a checkpoint each")
    writer.close()
    return {"without": statistics.median(without), "with": statistics.median(with_),
            "call": statistics.median(calls), "spread": (max(without) - min(without))}


# -- the tables ------------------------------------------------------------------------------
def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds < 10 else f"{seconds:.2f} s"


def ratio(ours: float, theirs: float) -> str:
    """``ours`` against ``theirs`` (times): as a share below 1 and a factor above."""
    share = ours / theirs
    return f"{share:.0%}" if share < 1 else f"{share:.1f}x"


def faster(ours: float, theirs: float) -> str:
    value = theirs / ours
    return f"{value:.1f}x faster" if value >= 1 else f"{1 / value:.1f}x slower"


def verdict(met: bool) -> str:
    return "met" if met else "**missed**"


def print_saving(table: dict[str, dict[int, float]], sizes: list[int], ray_note: str | None) -> None:
    print("**Saving a checkpoint** (ms; median of the repetitions). *diel blocks*: "
          "`DurableWriter.checkpoint`, what `trial.checkpoint()` costs the trial (into "
          "memory kept from its earlier checkpoints); *durable*: until the writer's "
          "callback (written, fsynced, renamed, folder fsynced); *writer busy*: what it "
          "blocks while the writer still writes the previous checkpoint. "
          "*torch.save + fsync*: the same durability, all blocking. Ray Tune: "
          "`torch.save` into a folder + `tune.report(checkpoint=...)` in a `Tuner` trial "
          "(Ray copies the folder into its storage, without fsync). The ratio columns "
          "give diel's blocking time as a share of the other's time.\n")
    ray = "Ray Tune 2.60.0 report" if ray_note is None else "Ray Tune 2.60.0"
    print(f"| state | diel blocks | diel durable | torch.save + fsync | diel blocks / it | "
          f"torch.save (no fsync) | diel blocks / it | {ray} | diel blocks / it | "
          f"diel blocks, writer busy |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for mib in sizes:
        ours = table["diel blocks"][mib]
        cells = [ms(ours), ms(table["diel durable"][mib])]
        for peer in ("torch.save + fsync", "torch.save"):
            cells += [ms(table[peer][mib]), ratio(ours, table[peer][mib])]
        if ray_note is None:
            cells += [ms(table["Ray Tune report"][mib]), ratio(ours, table["Ray Tune report"][mib])]
        else:
            cells += ["not measured", ""]
        cells.append(ms(table["diel blocks, writer busy"][mib]))
        print(f"| {mib} MiB | " + " | ".join(cells) + " |")
    if ray_note is not None:
        print(f"\nRay Tune: {ray_note}.")
    if max(sizes) >= 100:
        share = table["diel blocks"][100] / table["torch.save + fsync"][100]
        print(f"\nTarget: at 100 MiB diel blocks the trial for {share:.1%} of torch.save + "
              f"fsync's time (≤ {BLOCKING_TARGET:.0%}: {verdict(share <= BLOCKING_TARGET)}).")
    else:
        print("\nTarget (blocking ≤ 10% of torch.save's at 100 MiB): not judged, 100 MiB not run.")
    print()


def print_resume(table: dict[str, dict[int, float]], sizes: list[int], ray_note: str | None) -> None:
    print("**Resuming** (ms; median of the repetitions; every file just written, in the "
          "page cache). *diel from memory* (2 MPI ranks: a tuple server on the same node "
          "holds the checkpoint file's bytes in a memory file, checked when put; the "
          "worker's resume code): *in the rank*, a private map of the server's memory file "
          "(no copy) + `unpack` (layout and recorded checksum checked) + load; *isolated*, "
          "the rank passes the file's descriptor to its child, which maps, unpacks and "
          "loads. *diel from disk*: `read` (checksum checked) + load. Ray Tune: in the "
          "trial Ray restarted after a crash, `tune.get_checkpoint()` + `as_directory()` + "
          "`torch.load`. *touched*: until every byte of the state's tensors has been read "
          "once (a sum over each: ready to train). Ratios: Ray Tune's touched time over "
          "diel's.\n")
    ray = "Ray Tune 2.60.0 restore" if ray_note is None else "Ray Tune 2.60.0"
    print(f"| state | diel from memory, in the rank | touched | diel from memory, isolated | "
          f"touched | diel from disk | torch.load | {ray} | touched | in the rank vs Ray, "
          f"touched | isolated vs Ray, touched |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    ways = ("diel from memory, rank", "diel from memory, rank touched",
            "diel from memory, isolated", "diel from memory, isolated touched", "diel from disk",
            "torch.load")
    judged = ("diel from memory, rank touched", "diel from memory, isolated touched")
    for mib in sizes:
        cells = [ms(table[way][mib]) for way in ways]
        if ray_note is None:
            theirs = table["Ray Tune restore touched"][mib]
            cells += [ms(table["Ray Tune restore"][mib]), ms(theirs)]
            cells += [faster(table[way][mib], theirs) for way in judged]
        else:
            cells += ["not measured", "", "", ""]
        print(f"| {mib} MiB | " + " | ".join(cells) + " |")
    if ray_note is None:
        for way in judged:
            worst = min(table["Ray Tune restore touched"][mib] / table[way][mib] for mib in sizes)
            print(f"\nTarget, {way}: at its worst size Ray Tune's restore, touched, takes "
                  f"{worst:.2f}x diel's time (≥ {MEMORY_RESUME_TARGET:g}x: "
                  f"{verdict(worst >= MEMORY_RESUME_TARGET)}).")
    else:
        print(f"\nRay Tune: {ray_note}; target (resume from memory ≥ 5x faster than Ray "
              "Tune's) not judged.")
    print()


def print_overhead(figures: dict[str, float], epochs: int, repeats: int) -> None:
    overhead = (figures["with"] - figures["without"]) / figures["without"]
    call = figures["call"] / figures["without"]
    print(f"**Overhead per epoch**, examples/pytorch's CNN (8 channels, 4,000 digits, batch "
          f"64, 1 thread), blocks of {epochs} epochs, median of {repeats}, alternated:\n")
    print("| epoch without checkpoints | epoch with a checkpoint each | overhead | one "
          "checkpoint call (DurableWriter.checkpoint) | its share of an epoch |")
    print("|---|---|---|---|---|")
    print(f"| {ms(figures['without'])} | {ms(figures['with'])} | {overhead:+.2%} | "
          f"{ms(figures['call'])} | {call:.3%} |")
    print(f"\nTarget: overhead ≤ {OVERHEAD_TARGET:.0%} of epoch time: "
          f"{verdict(overhead <= OVERHEAD_TARGET)} (epochs without checkpoints varied by "
          f"{figures['spread'] / figures['without']:.1%} between repetitions: the noise).\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ray-python", help="a Python with ray[tune]==2.60.0 and torch (the peer)")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()),
                        help="the folder (the disk) every system writes to")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 10, 100],
                        help="state sizes in MiB (default 1 10 100)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs in each block of (c)")
    parser.add_argument("--repeats", type=int, default=REPEATS,
                        help=f"repetitions per figure, the median is reported (default {REPEATS})")
    parser.add_argument("--quick", action="store_true",
                        help="sizes 1 and 10 MiB and 2 epochs a block (a smoke run)")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.epochs = [1, 10], 2
    if min(args.sizes) < 1 or args.epochs < 1 or args.repeats < 1:
        parser.error("--sizes, --epochs and --repeats must be at least 1")
    started = time.perf_counter()
    load = os.getloadavg()
    print(f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}; Python "
          f"{platform.python_version()}, PyTorch {torch.__version__}; files in {args.dir}; "
          f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; load average at the start "
          f"{load[0]:.2f}\n")
    ray_note = ray_missing(args.ray_python, with_torch=True)
    ray_note = ray_note and f"not measured: {ray_note}"
    args.dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="diel-checkpoint-bench-", dir=args.dir) as tmp:
        root = Path(tmp)
        table = save_and_resume(args.sizes, args.repeats, root, args.ray_python, ray_note)
        overhead = epoch_overhead(args.repeats, args.epochs, root)
    print_saving(table, args.sizes, ray_note)
    print_resume(table, args.sizes, ray_note)
    print_overhead(overhead, args.epochs, args.repeats)
    print(f"Load average at the end: {os.getloadavg()[0]:.2f}; "
          f"{time.perf_counter() - started:.0f} s in all.")


if __name__ == "__main__":
    main()
