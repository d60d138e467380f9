"""Benchmark: MagmaDNN paper's MNIST MLP on the diel trainer vs PyTorch, same machine and threads.

784-528-528-528-10, sigmoid, softmax cross-entropy, SGD lr 0.05, weight decay 0.001,
batch 100, 5 epochs over 60,000 synthetic samples of MNIST shape. One untimed warm-up
epoch each first (CuPy compiles its kernels, BLAS and caches warm up), then the timed
epochs alternate between the two frameworks so both see the same machine load. Prints
both times, their ratio (total and median epoch), the achieved GEMM GFLOP/s, and on the
CPU a plain NumPy float32 matmul peak measured in the same run. On a GPU both multiply
in plain float32 (no TF32: CuPy's default, and PyTorch's for matmul), and diel runs
twice, alternated with the others: its step replayed as a CUDA graph (the default) and
eager (``cuda_graph: false``, as ``DIEL_TRAINER_NO_GRAPH=1`` makes every run), so one
run gives the before and after. PyTorch is skipped, with a note, when it is not
installed. ``--json`` adds one JSON line with the figures (benchmarks/gpu_check.py reads it).

    python benchmarks/trainer_bench.py [--threads N] [--device cpu|gpu] [--epochs 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository's trainer package


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="BLAS and torch threads")
    parser.add_argument("--device", default="cpu", help="cpu, gpu or gpu:N (GPU needs CuPy)")
    parser.add_argument("--epochs", type=int, default=5, help="epochs over the data")
    parser.add_argument("--samples", type=int, default=60000, help="training samples")
    parser.add_argument("--batch", type=int, default=100, help="batch size")
    parser.add_argument("--warmup", type=int, default=1, help="untimed epochs each before the timed ones")
    parser.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    return parser.parse_args()


ARGS = parse()
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(ARGS.threads)  # before NumPy loads BLAS

import numpy as np  # noqa: E402

from trainer import FullyConnected, Activation, Input, NeuralNetwork, Output, SGD, synthetic  # noqa: E402

SIZES = [784, 528, 528, 528, 10]
LR, WD = 0.05, 0.001


def gemm_flops(samples: int, epochs: int) -> float:
    """GEMM flops of training: forward x@W, backward dW, and dX for all but the first layer."""
    pairs = list(zip(SIZES[:-1], SIZES[1:]))
    per_sample = 2 * sum(a * b for a, b in pairs) * 2 + 2 * sum(a * b for a, b in pairs[1:])
    return float(per_sample) * samples * epochs


def numpy_peak(n: int = 2048, reps: int = 5) -> float:
    """Best GFLOP/s of a plain NumPy float32 n x n matrix product."""
    a = np.random.default_rng(0).random((n, n), dtype=np.float32)
    b = np.random.default_rng(1).random((n, n), dtype=np.float32)
    out = np.empty_like(a)
    np.matmul(a, b, out=out)
    best = min(_timed(lambda: np.matmul(a, b, out=out)) for _ in range(reps))
    return 2.0 * n ** 3 / best / 1e9


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def make_diel(graph: bool = True):
    """The paper's MLP as a diel NeuralNetwork (``graph``: its GPU step as a CUDA graph)."""
    layers = [Input((784,))]
    for i, units in enumerate(SIZES[1:-1]):
        layers += [FullyConnected(units, name=f"fc{i + 1}"), Activation("sigmoid")]
    layers += [FullyConnected(10, name="out"), Output("softmax")]
    return NeuralNetwork(layers, "cross_entropy", SGD(LR, weight_decay=WD),
                         {"device": ARGS.device, "seed": 0, "cuda_graph": graph})


def diel_epoch(model, xs, ys) -> tuple[float, float]:
    """One training epoch, until the GPU (if any) has finished it; (seconds, mean loss)."""
    start = time.perf_counter()
    result = model.fit(xs, ys, epochs=1, batch_size=ARGS.batch)
    if model.device.is_gpu:
        model.xp.cuda.get_current_stream().synchronize()
    return time.perf_counter() - start, result.loss


def make_torch(x: np.ndarray, y: np.ndarray):
    """The same MLP, optimizer and loss in PyTorch, or None when torch is not installed."""
    try:
        import torch  # noqa: PLC0415 - optional comparison
    except ImportError:
        return None
    torch.set_num_threads(ARGS.threads)
    dev = "cuda" if ARGS.device.startswith("gpu") else "cpu"
    torch.manual_seed(0)
    mods: list = []
    for a, b in zip(SIZES[:-2], SIZES[1:-1]):
        mods += [torch.nn.Linear(a, b), torch.nn.Sigmoid()]
    net = torch.nn.Sequential(*mods, torch.nn.Linear(SIZES[-2], SIZES[-1])).to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=LR, weight_decay=WD)
    lossf = torch.nn.CrossEntropyLoss()
    xt, yt = torch.from_numpy(x).to(dev), torch.from_numpy(y).to(dev)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)

    def epoch() -> tuple[float, float]:
        n = len(xt)
        start = time.perf_counter()
        perm = torch.randperm(n, device=dev)
        total = torch.zeros((), device=dev)
        for i in range(0, n, ARGS.batch):
            idx = perm[i:i + ARGS.batch]
            opt.zero_grad(set_to_none=True)
            loss = lossf(net(xt[idx]), yt[idx])
            loss.backward()
            opt.step()
            total += loss.detach() * len(idx)
        mean = float(total) / n
        sync()
        return time.perf_counter() - start, mean

    return torch, epoch


def main() -> int:
    x, y = synthetic(ARGS.samples, (784,), classes=10, seed=0)
    flops = gemm_flops(ARGS.samples, ARGS.epochs)
    print(f"MLP {'-'.join(map(str, SIZES))} sigmoid, SGD lr {LR} wd {WD}, batch {ARGS.batch}, "
          f"{ARGS.epochs} epochs x {ARGS.samples} samples, device {ARGS.device}, threads {ARGS.threads}")
    print("epochs alternate between the two frameworks, so both see the same machine load")
    cpu = ARGS.device == "cpu"
    model = make_diel()
    eager = None if cpu else make_diel(graph=False)
    xs, ys = model.xp.asarray(x), model.xp.asarray(y)  # data on the device, as PyTorch's below
    torch_run = make_torch(x, y)
    for _ in range(ARGS.warmup):
        diel_epoch(model, xs, ys)
        if eager is not None:
            diel_epoch(eager, xs, ys)
        if torch_run is not None:
            torch_run[1]()
    peaks, diel_times, eager_times, torch_times = [], [], [], []
    for epoch in range(ARGS.epochs):
        if cpu:
            peaks.append(numpy_peak())
        t, loss_diel = diel_epoch(model, xs, ys)
        diel_times.append(t)
        line = f"epoch {epoch}: diel {t:6.2f} s"
        if eager is not None:
            t, loss_eager = diel_epoch(eager, xs, ys)
            eager_times.append(t)
            line += f"  diel eager {t:6.2f} s"
        if torch_run is not None:
            t, loss_torch = torch_run[1]()
            torch_times.append(t)
            line += f"  PyTorch {t:6.2f} s"
        print(line + (f"  (NumPy peak {peaks[-1]:.0f} GFLOP/s)" if cpu else ""))
    t_diel = sum(diel_times)
    rate = flops / t_diel / 1e9
    peak = max(peaks) if peaks else None
    if peak is not None:
        print(f"NumPy float32 matmul peak (2048^3, best over the run): {peak:8.1f} GFLOP/s")
    line = f"diel trainer : {t_diel:7.2f} s  {rate:7.1f} GFLOP/s  final loss {loss_diel:.4f}"
    if peak is not None:
        line += f"  ({100 * rate / peak:.0f}% of NumPy peak; best epoch {100 * flops / ARGS.epochs / min(diel_times) / 1e9 / peak:.0f}%)"
    print(line)
    figures = {"device": ARGS.device, "epochs": ARGS.epochs, "samples": ARGS.samples, "batch": ARGS.batch,
               "diel_s": t_diel, "diel_epoch_s": statistics.median(diel_times)}
    if eager is not None:
        graphed = model._graph is not None and model._graph.launches > 0
        why = "" if graphed else "; ".join({*(model._graph.failed.values() if model._graph else ())})
        print(f"diel eager   : {sum(eager_times):7.2f} s  {flops / sum(eager_times) / 1e9:7.1f} GFLOP/s  "
              f"final loss {loss_eager:.4f}  (graph run {'replayed CUDA graphs' if graphed else 'ran EAGERLY'})"
              + (f": {why}" if why else ""))
        figures.update(diel_eager_s=sum(eager_times), diel_eager_epoch_s=statistics.median(eager_times),
                       graphed=graphed, graph_failed=why)
    if torch_run is None:
        print("PyTorch      : skipped (torch is not installed; pip install torch to compare)")
    else:
        torch = torch_run[0]
        t_torch = sum(torch_times)
        print(f"PyTorch {torch.__version__}: {t_torch:7.2f} s  {flops / t_torch / 1e9:7.1f} GFLOP/s  "
              f"final loss {loss_torch:.4f}  (torch threads {torch.get_num_threads()})")
        print(f"ratio diel/PyTorch time: {t_diel / t_torch:.2f}x  (median epochs: "
              f"{statistics.median(diel_times) / statistics.median(torch_times):.2f}x, "
              f"best epochs: {min(diel_times) / min(torch_times):.2f}x)")
        figures.update(torch_version=torch.__version__, torch_s=t_torch,
                       torch_epoch_s=statistics.median(torch_times))
    if ARGS.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
