"""Everything that needs a GPU, in one command, summarised in one README-ready table.

    python benchmarks/gpu_check.py

Without a usable GPU (no CuPy, CuPy without a GPU, or DIEL_TRAINER_NO_CUPY set) it prints
one line saying so and why, and exits 0. With one it runs, each in its own process with
its own time limit (a failure or a timeout is a table row, never a traceback):

1. every GPU test: ``pytest tests/trainer -k gpu`` (the ``gpu`` case of every
   device-parametrized test, the real memory types, offload on the GPU);
2. the trainer benchmark against PyTorch on the GPU (benchmarks/trainer_bench.py, reduced
   to 3 timed epochs over 60,000 samples after one warm-up epoch each): diel with its step
   replayed as a CUDA graph and eager (``cuda_graph: false``), PyTorch beside, alternated;
3. host offload: peak memory held by CuPy's pool and ms per step, with and without
   offload, on an MLP whose activations dominate its memory (1024-2048x12-10, batch
   8192, plain SGD, float32, both eager: a CUDA graph's arrays come from its own pool,
   which this does not count; the two runs must reach the same loss);
4. data parallelism on two ranks (``mpiexec -n 2``, the mpiexec found as the tests find
   it): the gradient Allreduce path the ranks chose (NCCL needs one GPU per rank; on a
   one-GPU machine both ranks share it), a float64 check that two ranks, their steps
   replayed as CUDA graphs around the Allreduce, equal one rank on the full batch (the
   row fails if they ran eagerly), and ms per step of the 784-528x3-10 MLP at global
   batch 200: two ranks with the graphs and eager, and one rank with its graph,
   alternated epochs (median of 5, after a warm-up epoch each).

The whole run took 45 s on an H100 (2026-11-26). Each step's limit (tests 120 s, benchmark 80 s,
offload 2 x 45 s, data parallelism 60 s) keeps it under 6 minutes even when every step
runs out of time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

#: Where each step's full output goes (``--logs``), None for nowhere.
LOGS: Path | None = None
#: Seconds each sub-step may take before it is reported as timed out.
LIMITS = {"tests": 120, "bench": 80, "offload": 45, "dataparallel": 60}
OFFLOAD_MODEL = {"inputs": 1024, "width": 2048, "depth": 12, "classes": 10, "batch": 8192, "steps": 5}
PARALLEL_MODEL = {"hidden": [528, 528, 528], "batch": 200, "samples": 20000, "rounds": 5}


@dataclass
class Row:
    """One line of the table."""

    check: str
    ok: bool
    figures: str
    seconds: float


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", type=Path, help="write each step's full output to a file in this folder")
    parser.add_argument("--part", choices=["offload", "dataparallel"], help=argparse.SUPPRESS)
    parser.add_argument("--offload", type=int, default=0, help=argparse.SUPPRESS)
    return parser.parse_args()


# -- running a step -------------------------------------------------------------------------
def run_step(argv: list[str], limit: float, env: dict[str, str] | None = None) -> tuple[bool, str, str]:
    """Run ``argv`` from the repository root; ``(finished with 0, stdout, why it failed)``."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=limit, cwd=REPO, env=full_env)
    except subprocess.TimeoutExpired as e:
        log(argv, e.stdout, e.stderr)
        return False, "", f"timed out after {limit:.0f} s"
    except OSError as e:
        return False, "", f"could not start {argv[0]}: {e}"
    log(argv, done.stdout, done.stderr)
    if done.returncode != 0:
        tail = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:] or ["no output"]
        return False, done.stdout, f"exit {done.returncode}: {tail[0][:160]}"
    return True, done.stdout, ""


def log(argv: list[str], stdout: str | bytes | None, stderr: str | bytes | None) -> None:
    """Append a step's command and output to ``LOGS/gpu_check.log`` when ``--logs`` was given."""
    if LOGS is None:
        return
    LOGS.mkdir(parents=True, exist_ok=True)
    text = [part.decode(errors="replace") if isinstance(part, bytes) else part or "" for part in (stdout, stderr)]
    with open(LOGS / "gpu_check.log", "a", encoding="utf-8") as out:
        out.write(f"$ {' '.join(argv)}\n{text[0]}\n--- stderr ---\n{text[1]}\n\n")


def last_json(text: str) -> dict:
    """The last line of ``text`` that parses as a JSON object."""
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    raise ValueError("no JSON line in the output")


def timed(check: str, body) -> Row:
    """Run ``body() -> (ok, figures)`` and time it; an unexpected error is a failed row."""
    start = time.perf_counter()
    try:
        ok, figures = body()
    except Exception as e:  # a row says what went wrong; the other checks still run
        ok, figures = False, f"{type(e).__name__}: {e}"[:200]
    return Row(check, ok, figures, time.perf_counter() - start)


# -- the four checks ------------------------------------------------------------------------
def check_tests() -> tuple[bool, str]:
    ok, out, why = run_step([sys.executable, "-m", "pytest", "tests/trainer", "-q", "-k", "gpu",
                             "-p", "no:cacheprovider"], LIMITS["tests"])
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|skipped|errors?)", out)}
    summary = ", ".join(f"{n} {word}" for word, n in counts.items()) or "no tests ran"
    if why:
        summary += f"; {why}"
    return ok and counts.get("passed", 0) > 0, summary


def check_bench() -> tuple[bool, str]:
    ok, out, why = run_step([sys.executable, "benchmarks/trainer_bench.py", "--device", "gpu", "--epochs", "3",
                             "--samples", "60000", "--json"], LIMITS["bench"])
    if not ok:
        return False, why
    f = last_json(out)
    graph = f"diel, CUDA graph {f['diel_epoch_s']:.2f} s" + ("" if f["graphed"] else
                                                             f" (it ran EAGERLY: {f['graph_failed'][:160]})")
    eager = f"diel, eager {f['diel_eager_epoch_s']:.2f} s"
    if "torch_s" not in f:
        return f["graphed"], f"{graph}, {eager} per epoch; PyTorch not installed"
    torch = f["torch_epoch_s"]
    return f["graphed"], (f"median of {f['epochs']} epochs of {f['samples']:,} samples at batch {f['batch']} "
                          f"(after a warm-up epoch): {graph} ({f['diel_epoch_s'] / torch:.2f}x PyTorch's time), "
                          f"{eager} ({f['diel_eager_epoch_s'] / torch:.2f}x), PyTorch {f['torch_version']} "
                          f"{torch:.2f} s")


def check_offload() -> tuple[bool, str]:
    runs = {}
    for offload in (0, 1):
        ok, out, why = run_step([sys.executable, __file__, "--part", "offload", "--offload", str(offload)],
                                LIMITS["offload"])
        if not ok:
            return False, f"{'with' if offload else 'without'} offload: {why}"
        runs[offload] = last_json(out)
    off, on = runs[0], runs[1]
    same = abs(off["loss"] - on["loss"]) <= 1e-5 * max(1.0, abs(off["loss"]))
    m = OFFLOAD_MODEL
    figures = (f"{m['inputs']}-{m['width']}x{m['depth']}-{m['classes']} MLP, batch {m['batch']}: peak pool "
               f"{off['peak_mb']:,.0f} MB without, {on['peak_mb']:,.0f} MB with offload "
               f"({on['peak_mb'] / off['peak_mb']:.0%}); {off['ms_per_step']:.0f} vs {on['ms_per_step']:.0f} ms/step"
               + ("" if same else f"; losses differ ({off['loss']:.6f} vs {on['loss']:.6f})"))
    return same and on["swapped"] > 0, figures


def check_dataparallel() -> tuple[bool, str]:
    from diel.executive.command import find_mpiexec  # noqa: PLC0415 - the same mpiexec the tests use

    ok, out, why = run_step([find_mpiexec(), "-n", "2", sys.executable, __file__, "--part", "dataparallel"],
                            LIMITS["dataparallel"], env={"OMP_NUM_THREADS": "1"})
    if not ok:
        return False, why
    f = last_json(out)
    graphed = "" if f["graphed"] else f" (it ran EAGERLY: {f['graph_failed'][:160]})"
    figures = (f"Allreduce path: {f['transport']} ({f['why']}); 2 ranks = 1 rank on the full batch "
               f"(float64, CUDA graphs{graphed}): {'yes' if f['equal'] else 'NO'}; global batch "
               f"{PARALLEL_MODEL['batch']}, median of {PARALLEL_MODEL['rounds']} alternated epochs: 2 ranks "
               f"{f['ms_per_step']:.2f} ms/step with CUDA graphs ({f['allreduce_share']:.0%} in the Allreduce), "
               f"{f['eager_ms_per_step']:.2f} ms/step eager ({f['eager_allreduce_share']:.0%}); "
               f"1 rank {f['single_ms_per_step']:.2f} ms/step with the graph")
    return bool(f["equal"]) and bool(f["graphed"]), figures


# -- the parts run in their own processes ---------------------------------------------------
def part_offload(offload: bool) -> None:
    """Train the offload model a few steps; print peak pool memory, ms per step and the loss."""
    import cupy as cp  # noqa: PLC0415 - this part runs only where a GPU was found

    from trainer import SGD, NeuralNetwork, build_mlp  # noqa: PLC0415

    m = OFFLOAD_MODEL
    pool = cp.get_default_memory_pool()
    rng = cp.random.default_rng(0)
    x = rng.standard_normal((m["batch"] * (m["steps"] + 1), m["inputs"]), dtype=cp.float32)
    y = rng.integers(0, m["classes"], len(x))
    pool.free_all_blocks()
    data = pool.total_bytes()
    model = NeuralNetwork(build_mlp(m["inputs"], [m["width"]] * m["depth"], classes=m["classes"]), "cross_entropy",
                          SGD(0.01), {"device": "gpu", "seed": 0, "offload": offload, "shuffle": False,
                                      "cuda_graph": False})  # a graph's arrays come from its own pool
    model.fit(x[:m["batch"]], y[:m["batch"]], epochs=1, batch_size=m["batch"])  # warm-up step
    cp.cuda.get_current_stream().synchronize()
    start = time.perf_counter()
    result = model.fit(x[m["batch"]:], y[m["batch"]:], epochs=1, batch_size=m["batch"])
    cp.cuda.get_current_stream().synchronize()
    seconds = time.perf_counter() - start
    swapped = model._offloader.swapped_out if model._offloader is not None else 0
    print(json.dumps({"peak_mb": (pool.total_bytes() - data) / 2 ** 20, "ms_per_step": 1e3 * seconds / m["steps"],
                      "loss": result.loss, "swapped": swapped}))


def part_dataparallel() -> None:
    """Under mpiexec -n 2: the Allreduce path, two ranks against one, and the step time."""
    import numpy as np  # noqa: PLC0415
    from mpi4py import MPI  # noqa: PLC0415

    from trainer import SGD, NeuralNetwork, build_mlp, synthetic  # noqa: PLC0415

    comm = MPI.COMM_WORLD
    x, y = synthetic(203, (8,), classes=3, seed=0)

    def small(parallel: bool) -> NeuralNetwork:
        params = {"device": "gpu", "seed": 3, "dtype": "float64", **({"comm": comm} if parallel else {})}
        model = NeuralNetwork(build_mlp(8, hidden=[16, 12], classes=3), "cross_entropy",
                              SGD(0.05, momentum=0.9), params)
        model.fit(x, y, epochs=2, batch_size=25)
        return model

    parallel, single = small(True), small(False)
    mine = parallel.updater.flat_params.get()
    equal = np.allclose(mine, single.updater.flat_params.get(), rtol=1e-10, atol=1e-12)
    equal = all(comm.allgather(equal)) and all(np.array_equal(w, mine) for w in comm.allgather(mine))
    places = comm.allgather(parallel.device.index)
    transport = parallel.reducer.transport
    why = ("each rank has its own GPU" if transport == "nccl" else
           "NCCL needs one GPU per rank; both ranks share GPU 0" if len(set(places)) < len(places) else
           "NCCL not usable here")

    m = PARALLEL_MODEL
    xs, ys = synthetic(m["samples"], (784,), classes=10, seed=0)
    steps = m["samples"] // m["batch"]

    def model(parallel: bool, graph: bool) -> NeuralNetwork:
        params = {"device": "gpu", "seed": 0, "cuda_graph": graph, **({"comm": comm} if parallel else {})}
        made = NeuralNetwork(build_mlp(784, m["hidden"]), "cross_entropy", SGD(0.05), params)
        made.fit(xs, ys, epochs=1, batch_size=m["batch"])  # warm-up: kernels compiled, graphs captured
        return made

    def epoch(made: NeuralNetwork) -> tuple[float, float]:
        """One timed epoch: (seconds, seconds in the Allreduce)."""
        before = made.allreduce_seconds
        made.xp.cuda.get_current_stream().synchronize()
        start = time.perf_counter()
        made.fit(xs, ys, epochs=1, batch_size=m["batch"])
        made.xp.cuda.get_current_stream().synchronize()
        return time.perf_counter() - start, made.allreduce_seconds - before

    runs = {"graph": model(True, True), "eager": model(True, False)}
    single = model(False, True) if comm.rank == 0 else None
    times: dict[str, list[tuple[float, float]]] = {"graph": [], "eager": [], "single": []}
    for _ in range(m["rounds"]):  # alternated, so a slower stretch of the machine hits all three
        for name, made in runs.items():
            comm.Barrier()
            times[name].append(epoch(made))
        comm.Barrier()
        if single is not None:  # one rank alone, the other waiting
            times["single"].append(epoch(single))
    comm.Barrier()
    not_replayed = [(made._graph.failed if made._graph is not None else "no graph")
                    for made in (parallel, runs["graph"]) if made._graph is None or not made._graph.launches]
    not_replayed = [why for mine in comm.allgather(not_replayed) for why in mine]
    if comm.rank == 0:
        def median(name: str) -> tuple[float, float]:
            seconds, allreduce = sorted(times[name])[len(times[name]) // 2]
            return 1e3 * seconds / steps, allreduce / seconds

        (graph_ms, graph_share), (eager_ms, eager_share) = median("graph"), median("eager")
        print(json.dumps({"transport": transport, "why": why, "equal": bool(equal), "graphed": not not_replayed,
                          "graph_failed": str(not_replayed[:1]), "ms_per_step": graph_ms,
                          "allreduce_share": graph_share, "eager_ms_per_step": eager_ms,
                          "eager_allreduce_share": eager_share, "single_ms_per_step": median("single")[0]}))
    comm.Barrier()


# -- the table ------------------------------------------------------------------------------
def gpu_problem() -> str | None:
    """Why there is no usable GPU here, or None when CuPy sees one."""
    from trainer.backend import cupy_or_none, cupy_problem  # noqa: PLC0415

    return None if cupy_or_none() is not None else cupy_problem()


def describe_gpu() -> str:
    import cupy as cp  # noqa: PLC0415

    props = cp.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    return (f"{name}, CuPy {cp.__version__}, CUDA runtime {cp.cuda.runtime.runtimeGetVersion()}, "
            f"Python {sys.version.split()[0]}")


def main() -> int:
    global LOGS
    args = parse()
    LOGS = args.logs
    if args.part == "offload":
        part_offload(bool(args.offload))
        return 0
    if args.part == "dataparallel":
        part_dataparallel()
        return 0
    problem = gpu_problem()
    if problem is not None:
        print(f"gpu_check: no GPU here ({problem}); nothing was run")
        return 0
    print(f"GPU checks on {describe_gpu()}", flush=True)
    rows = []
    for check, body in (("GPU tests (pytest tests/trainer -k gpu)", check_tests),
                        ("trainer vs PyTorch (benchmarks/trainer_bench.py --device gpu)", check_bench),
                        ("host offload", check_offload),
                        ("data parallelism, 2 ranks (mpiexec -n 2)", check_dataparallel)):
        rows.append(timed(check, body))
        print(f"  {check}: {'pass' if rows[-1].ok else 'FAIL'} ({rows[-1].seconds:.0f} s)", flush=True)
    print()
    print("| check | result | figures | time |")
    print("|---|---|---|---|")
    for row in rows:
        print(f"| {row.check} | {'pass' if row.ok else '**fail**'} | {row.figures} | {row.seconds:.0f} s |")
    return 0 if all(row.ok for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
