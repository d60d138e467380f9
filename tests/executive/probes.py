"""Module functions the executive tests run inside real MPI jobs.

Each writes what it observed to files under ``ctx.config["out"]`` so the test, which
runs outside the job, can assert on it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


def record_comms(ctx) -> None:
    """Write this rank's view of its communicators as JSON."""
    world = ctx.world.rank
    view = {
        "world_rank": world, "module": ctx.name, "copy": ctx.copy, "rank": ctx.rank,
        "size": ctx.size, "comm_rank": ctx.comm.rank, "comm_size": ctx.comm.size,
        "copy_members": ctx.comm.allgather(world),
        "module_members": ctx.module_comm.allgather(world),
    }
    Path(ctx.config["out"], f"rank{world}.json").write_text(json.dumps(view))


def record_order(ctx) -> None:
    """Append 'module iteration start end' to the shared order file, after an optional sleep."""
    start = time.time()
    time.sleep(float(ctx.config.get("sleep", 0)))
    line = f"{ctx.name} {ctx.iteration} {start:.6f} {time.time():.6f}\n"
    descriptor = os.open(ctx.config["out"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(descriptor, line.encode())
    finally:
        os.close(descriptor)


def sleep(ctx) -> None:
    """Hold the group for ``seconds`` without using CPU."""
    time.sleep(float(ctx.config["seconds"]))


def nothing(ctx) -> None:
    """Do nothing (the test measures the wait before it)."""


def raise_on_rank(ctx) -> None:
    """Raise on one world rank; every other rank blocks waiting for a message that never comes."""
    if ctx.world.rank == int(ctx.config["rank"]):
        time.sleep(0.5)
        raise ValueError("boom from the test module")
    ctx.recv(ctx.name, copy=0, rank=0)


def record_threads(ctx) -> None:
    """Write the BLAS thread settings this rank was given."""
    view = {"threads": ctx.threads, "omp": os.environ.get("OMP_NUM_THREADS"),
            "openblas": os.environ.get("OPENBLAS_NUM_THREADS"),
            "local_rank": ctx.local_rank, "local_size": ctx.local_size}
    Path(ctx.config["out"], f"threads{ctx.world.rank}.json").write_text(json.dumps(view))
