"""The checkpoint benchmark's resume from memory, on two MPI ranks.

Launched by benchmarks/checkpoint_bench.py::

    mpiexec -n 2 python benchmarks/checkpoint_memory.py --sizes 1 10 100 --dir DIR --out TIMES.json

Rank 0 is a tuple server; rank 1 a worker. For each size (MiB) rank 1 takes the state
(benchmarks/checkpoint_state.py), writes its checkpoint file (``diel.checkpoints.write``)
and keeps the file's bytes in the server's distributed store (``dist_tput``), as a worker
does once a checkpoint is durable. Then it times two resumes from memory, each twice (the
first warms up), timing the second:

* ``memfd``: as an isolated trial resumes (diel/worker/link.py, child.py): ``dist_tread``
  of the bytes from the server straight into a memory file (``memfd``, which the rank
  hands its child), the child's private map of it, ``diel.checkpoints.unpack`` of the map
  (checksum checked, no copy) and ``Snapshot.load``;
* ``unpack``: as a trial in the rank resumes: ``dist_tread`` into a new array,
  ``diel.checkpoints.unpack`` of it (checksum checked, no copy) and ``Snapshot.load``.

Writes ``{"memfd": {mib: s}, "unpack": {mib: s}}`` as JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import sys
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

from diel.checkpoints import take, unpack, write
from diel.checkpoints.layout import checkpoint_path
from tuplespace import Client, Server

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checkpoint_state import make_state  # noqa: E402

SERVER = 0


def through_memfd(space: Client, tag: str, nbytes: int, checksum: str) -> float:
    """Seconds to read the checkpoint under ``tag`` from the space into a memory file,
    map that privately, unpack the map and load its state."""
    started = time.perf_counter()
    fd = os.memfd_create("diel-bench-checkpoint", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, nbytes)
        with mmap.mmap(fd, nbytes) as mapped:
            into = np.frombuffer(mapped, np.uint8)
            space.dist_tread(tag, out=into)
            del into
        image = mmap.mmap(fd, nbytes, access=mmap.ACCESS_COPY)
    finally:
        os.close(fd)
    state = unpack(image, checksum, tag).load()
    seconds = time.perf_counter() - started
    assert state["epoch"] == 1
    return seconds


def unpacked(space: Client, tag: str, nbytes: int, checksum: str) -> float:
    """Seconds to read the checkpoint under ``tag`` from the space into a new array,
    unpack it and load its state."""
    started = time.perf_counter()
    state = unpack(space.dist_tread(tag), checksum, tag).load()
    seconds = time.perf_counter() - started
    assert state["epoch"] == 1
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", required=True, help="state sizes in MiB")
    parser.add_argument("--dir", type=Path, required=True, help="folder for the checkpoint files")
    parser.add_argument("--out", type=Path, required=True, help="JSON file for the timings")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD.Dup()
    if comm.size != 2:
        raise SystemExit(f"checkpoint_memory: run with exactly 2 ranks, got {comm.size}")
    if comm.rank == SERVER:
        Server(comm, [SERVER]).run()
        return
    space = Client(comm, [SERVER])
    timings: dict[str, dict[int, float]] = {"memfd": {}, "unpack": {}}
    try:
        for mib in args.sizes:
            path = checkpoint_path(args.dir, mib, 1)
            written = write(take(make_state(mib)), path, 1)
            tag = f"bench/ckpt/{mib}"
            space.dist_tput(tag, np.fromfile(path, dtype=np.uint8))
            for _ in range(2):   # the first one warms up
                for way, resume in (("memfd", through_memfd), ("unpack", unpacked)):
                    timings[way][mib] = resume(space, tag, written.nbytes, written.checksum)
            space.dist_tget(tag)
    finally:
        space.shutdown()
    args.out.write_text(json.dumps(timings))


if __name__ == "__main__":
    main()
