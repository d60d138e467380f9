"""Timing rules shared by the benchmarks, so that every system is measured the same way.

Two windows, used for diel and for every peer alike:

* **launch to exit** (:func:`launch_to_exit`): from starting a process to its exit, what a
  user waits for: interpreter and MPI start-up, imports, creating the study or storage, the
  work, the final commit.
* **steady state** (:func:`steady_rate`): from the system's own per-trial completion
  timestamps. Sort the n completion times ``c_1 <= ... <= c_n``; let ``k10 = ceil(0.1 n)``
  and ``k90 = ceil(0.9 n)`` (the trials with which 10% and 90% of the trials are done).
  The rate is ``(k90 - k10) / (c_k90 - c_k10)``: trials completed per second once running,
  with start-up and the tail (the last trials draining) left out.

Every figure is the median of :data:`REPEATS` repetitions (:func:`median_figures`); a
benchmark runs repetition 1 of every system, then repetition 2, and so on, so a slow
spell of a shared machine does not land on one system only.

Every system starts with its code byte-compiled (:func:`compile_sources`): the peers are
installed packages, compiled by pip, while diel's sources in a checkout are compiled on
first import only where Python may write its cache (``PYTHONDONTWRITEBYTECODE`` unset);
without this, every rank of every diel launch would compile diel again.
"""

from __future__ import annotations

import compileall
import statistics
import subprocess
import time
from pathlib import Path
from typing import Iterable, Mapping, Sequence

REPEATS = 3


def compile_sources(root: Path) -> list[str]:
    """Byte-compile the packages of the checkout at ``root`` (diel, tuplespace, trainer,
    benchmarks) into their ``__pycache__`` folders, as installing them would; the
    folders compiled. Python reads the cache even where it may not write one."""
    folders = [str(root / name) for name in ("diel", "tuplespace", "trainer", "benchmarks")
               if (root / name).is_dir()]
    for folder in folders:
        if not compileall.compile_dir(folder, quiet=1):
            raise SystemExit(f"could not byte-compile {folder}")
    return folders


def launch_to_exit(argv: Sequence[str], cwd: str | Path, env: Mapping[str, str],
                   timeout: float) -> tuple[float, subprocess.CompletedProcess]:
    """Run ``argv`` (no shell) and return (seconds from launch to exit, the finished process)."""
    started = time.perf_counter()
    done = subprocess.run(list(argv), cwd=str(cwd), env=dict(env), capture_output=True,
                          text=True, timeout=timeout)
    return time.perf_counter() - started, done


def _rank(n: int, percent: int) -> int:
    """``ceil(percent / 100 * n)`` in exact integer arithmetic (1-based rank)."""
    return -(-n * percent // 100)


def steady_rate(completions: Iterable[float]) -> float:
    """Trials per second between the 10% and 90% completions (module docstring).

    ``completions`` are per-trial completion times in seconds on any one clock. Raises
    ``ValueError`` for fewer than 10 trials or when the window has no width (timestamps
    too coarse to measure it).
    """
    times = sorted(completions)
    n = len(times)
    if n < 10:
        raise ValueError(f"a steady-state rate needs at least 10 trials, got {n}")
    k10, k90 = _rank(n, 10), _rank(n, 90)
    width = times[k90 - 1] - times[k10 - 1]
    if width <= 0:
        raise ValueError(f"the 10%-90% window of {n} trials has no width: "
                         "timestamps too coarse to measure it")
    return (k90 - k10) / width


def median_figures(runs: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """The median of each figure over ``runs`` (one mapping of figures per repetition)."""
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


#: The Ray Tune release every benchmark measures (a peer, installed apart, never a dependency).
RAY_VERSION = "2.60.0"


def ray_missing(ray_python: str | None, with_torch: bool = False) -> str | None:
    """Why Ray Tune :data:`RAY_VERSION` cannot be measured through ``ray_python`` (the
    benchmarks' ``--ray-python``: a separate environment's Python), or None when it can;
    ``with_torch`` when the peer also needs PyTorch."""
    torch = " and torch" if with_torch else ""
    if ray_python is None:
        return f"no --ray-python given (a Python with ray[tune]=={RAY_VERSION}{torch})"
    imports = "import ray, ray.tune" + (", torch" if with_torch else "")
    try:
        done = subprocess.run([ray_python, "-c", f"{imports}; print(ray.__version__)"],
                              capture_output=True, text=True, timeout=120)
    except OSError as e:
        return f"--ray-python {ray_python}: {e.strerror}"
    if done.returncode != 0:
        return f"--ray-python {ray_python} cannot import ray[tune]{torch}"
    if done.stdout.strip() != RAY_VERSION:
        return f"--ray-python {ray_python} has Ray {done.stdout.strip()}, not {RAY_VERSION}"
    return None
