"""The checkpoint benchmark's resume from memory, on two MPI ranks.

Launched by benchmarks/checkpoint_bench.py::

    mpiexec -n 2 python benchmarks/checkpoint_memory.py --sizes 1 10 100 --dir DIR --out TIMES.json

Rank 0 is a tuple server; rank 1 a worker. For each size (MiB) rank 1 takes the state
(benchmarks/checkpoint_state.py), writes its checkpoint file (``diel.checkpoints.write``)
and keeps the file's bytes in the server's distributed store, checked once against its
checksum, as a worker does once a checkpoint is durable (``TrialLink._keep_copy``). Then
it times two resumes from memory through the worker's own code, each twice (the first
warms up), timing the second:

* ``rank``: a trial in the rank resumes (``resume_point`` with
  ``TrialLink.memory_image``): the copy read from the space (on the server's node, a
  private map of the server's memory file: no copy), ``unpack`` (layout and recorded
  checksum checked; the pass over the bytes was made when they were put) and load;
* ``isolated``: an isolated trial resumes: the rank gets a descriptor of the copy
  (``TrialLink.memory_copy``: the server's memory file on its node) and passes it over a
  socket, as to its child; the child maps it privately (``tuplespace.memfiles.map_private``),
  ``unpack``s and loads (the child's side runs in this process here).

Each is timed until the state is loaded (*returns*) and until every byte of its tensors
has been read once (*touched*, ``checkpoint_state.touch``: ready to train). Writes
``{"rank": {mib: s}, "rank touched": ..., "isolated": ..., "isolated touched": ...,
"reads": {"mapped": n, "copied": n}}`` as JSON to ``--out`` (``reads``: how the space
served the resumes' reads, mapped from the server's memory file or copied).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from multiprocessing.reduction import recv_handle, send_handle
from pathlib import Path

from mpi4py import MPI

from diel.checkpoints import take, unpack, write
from diel.checkpoints.layout import checkpoint_path
from diel.search.protocol import report_tag
from diel.worker.link import TrialLink
from diel.worker.resume import resume_point
from tuplespace import Client, Server
from tuplespace.memfiles import map_private

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checkpoint_state import make_state, touch  # noqa: E402

SERVER = 0
STUDY = "bench"


def in_the_rank(link: TrialLink, restore: dict) -> tuple[float, float]:
    """Seconds until a trial in the rank has its state back, and until it is touched."""
    started = time.perf_counter()
    found = resume_point(restore, link.number, link.memory_image, print)
    state = found[1].load()
    loaded = time.perf_counter() - started
    touch(state)
    return loaded, time.perf_counter() - started


def isolated(link: TrialLink, restore: dict, pipe: tuple[socket.socket, socket.socket]) -> tuple[float, float]:
    """Seconds until an isolated trial has its state back (the rank's descriptor passed
    over a socket, the child's map, unpack and load), and until it is touched."""
    started = time.perf_counter()
    fd = link.memory_copy(restore["nbytes"])
    assert fd is not None, "the space holds no copy"
    try:
        send_handle(pipe[0], fd, os.getpid())
    finally:
        os.close(fd)
    received = recv_handle(pipe[1])
    try:
        image = map_private(received, restore["nbytes"])
    finally:
        os.close(received)
    state = unpack(image, restore["checksum"], restore["path"], whole_pass=False).load()
    loaded = time.perf_counter() - started
    touch(state)
    return loaded, time.perf_counter() - started


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
    timings: dict[str, dict[int, float]] = {way: {} for way in
                                            ("rank", "rank touched", "isolated", "isolated touched")}
    pipe = socket.socketpair(socket.AF_UNIX)
    try:
        for mib in args.sizes:
            path = checkpoint_path(args.dir, mib, 1)
            written = write(take(make_state(mib)), path, 1)
            link = TrialLink(space, STUDY, 0, mib, time.perf_counter(), keep_copies=True)
            link.checkpointed(written)   # kept in the space (checked once), reported
            space.tget(report_tag(STUDY))   # the checkpoint report, for nobody here
            restore = {"step": 1, "path": str(path), "nbytes": written.nbytes,
                       "checksum": written.checksum, "older": []}
            for _ in range(2):   # the first one warms up
                for way, resume in (("rank", lambda: in_the_rank(link, restore)),
                                    ("isolated", lambda: isolated(link, restore, pipe))):
                    timings[way][mib], timings[f"{way} touched"][mib] = resume()
            link.drop_copy()
    finally:
        for end in pipe:
            end.close()
        space.shutdown()
    args.out.write_text(json.dumps({**timings, "reads": space.dist_reads}))


if __name__ == "__main__":
    main()
