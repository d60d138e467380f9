"""Tuple-space benchmark: latency, throughput and distributed-store bandwidth vs raw MPI.

Run with exactly 8 ranks (4 servers + 4 clients)::

    mpiexec -n 8 python benchmarks/tuplespace_bench.py [--quick]

Ranks 0-3 are tuple servers, ranks 4-7 clients (A = 4, B = 5). It prints one markdown
table, in the README's format, every figure the median of 3 repetitions
(benchmarks/timing.py):

* ping-pong through the space (A tputs, B tgets and tputs back, A tgets; timed on A) vs a
  raw mpi4py ``send``/``recv`` ping-pong of the same value between A and B;
* operations per second one server sustains with 4 clients (each tputs then tgets);
* ``dist_tput`` of a 256 MiB float32 array from A, and ``dist_tget`` of it on B, against
  raw MPI streams with the same fan-out: the same 4 contiguous chunks ``Isend`` from A to
  the same 4 server ranks (put), and ``Irecv`` by B from those 4 ranks after B asks each
  for its chunk (get). Both sides are timed on the client, from the start of the call to
  its return with every transfer complete. ``dist_tget`` and the raw get each write into
  a reused array (``out=``) and into a new one (which pays the page faults of a fresh
  256 MiB allocation).

The raw streams run first, while the server ranks are still plain MPI ranks (they wait
in blocking ``Recv``/``Send``, as raw MPI code does); then the server ranks become tuple
servers for the rest. Idle ranks wait in non-blocking barriers with backoff, so they do
not steal cores.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
from mpi4py import MPI

from timing import REPEATS
from tuplespace import Client, Server, wait_until

NEEDED = 8
SERVERS = [0, 1, 2, 3]
A, B = 4, 5
DATA, ASK = 12, 13   # MPI tags of the raw streams
PING_PONG_TARGET = 4.0   # a round trip through the space at most 4x raw MPI's


def quiet_barrier(comm: MPI.Comm) -> None:
    """A barrier that sleeps instead of spinning (MPICH's Barrier spins)."""
    req = comm.Ibarrier()
    wait_until(req.Test)


def median_of(runs: int, fn) -> float:
    """The median of ``runs`` timings of ``fn()`` (seconds, as fn returns them)."""
    return statistics.median(fn() for _ in range(runs))


def ping_pong(space: Client, clients: MPI.Comm, world: MPI.Comm, n: int) -> tuple[float, float]:
    """(space, raw) round-trip times in seconds, measured on rank A."""
    rank = world.rank

    def space_run() -> float:
        quiet_barrier(clients)
        t0 = time.perf_counter()
        if rank == A:
            for i in range(n):
                space.tput("pp/ping", i)
                space.tget("pp/pong")
        elif rank == B:
            for _ in range(n):
                space.tput("pp/pong", space.tget("pp/ping"))
        return (time.perf_counter() - t0) / n

    def raw_run() -> float:
        quiet_barrier(clients)
        t0 = time.perf_counter()
        if rank == A:
            for i in range(n):
                world.send(i, B, 11)
                world.recv(source=B, tag=11)
        elif rank == B:
            for _ in range(n):
                world.send(world.recv(source=A, tag=11), A, 11)
        return (time.perf_counter() - t0) / n

    space_run()  # warm up (first contact with the server)
    return median_of(REPEATS, space_run), median_of(REPEATS, raw_run)


def throughput(space: Client, clients: MPI.Comm, n: int) -> float:
    """Operations per second of one server with all clients putting then taking."""
    tag = f"ops/{clients.rank}"   # one namespace: all on one server
    quiet_barrier(clients)
    t0 = time.perf_counter()
    for i in range(n):
        space.tput(tag, i)
    for _ in range(n):
        space.tget(tag)
    elapsed = clients.allreduce(time.perf_counter() - t0, op=MPI.MAX)
    return 2 * n * clients.size / elapsed


def test_array(mib: int) -> np.ndarray:
    """The array every bandwidth test moves (the same on every rank that makes it)."""
    return np.random.default_rng(0).random(mib * 2**18, dtype=np.float32)


def chunks(array: np.ndarray) -> list[np.ndarray]:
    """``array`` cut into one contiguous view per server, as dist_tput cuts it."""
    return np.array_split(array, len(SERVERS))


def raw_bandwidth(world: MPI.Comm, mib: int, runs: int) -> dict:
    """Median seconds of the raw fan-out streams (module docstring), timed on A and B."""
    rank = world.rank
    times: dict[str, list[float]] = {"raw_put": [], "raw_get": [], "raw_get_new": []}
    arr = test_array(mib) if rank in (A, B) else None
    out = np.empty_like(arr) if rank == B else None
    held = None
    if rank in SERVERS:   # this rank's chunk: array_split's sizes
        base, extra = divmod(mib * 2**18, len(SERVERS))
        held = np.empty(base + (SERVERS.index(rank) < extra), np.float32)
    for run in range(runs + 1):   # first round warms up
        quiet_barrier(world)
        if rank == A:
            t0 = time.perf_counter()
            MPI.Request.Waitall([world.Isend(part, server, DATA)
                                 for server, part in zip(SERVERS, chunks(arr))])
            times["raw_put"].append(time.perf_counter() - t0)
        elif rank in SERVERS:
            world.Recv(held, A, DATA)
        for key in ("raw_get", "raw_get_new"):
            quiet_barrier(world)
            if rank == B:
                t0 = time.perf_counter()
                target = out if key == "raw_get" else np.empty_like(arr)
                reqs = [world.Irecv(part, server, DATA)
                        for server, part in zip(SERVERS, chunks(target))]
                for server in SERVERS:
                    world.send(None, server, ASK)
                MPI.Request.Waitall(reqs)
                times[key].append(time.perf_counter() - t0)
                if run == 0 and not np.array_equal(target, arr):
                    raise SystemExit("the raw streams delivered a different array")
            elif rank in SERVERS:
                world.recv(source=B, tag=ASK)
                world.Send(held, B, DATA)
    return {k: statistics.median(v[1:]) for k, v in times.items() if v}


def space_bandwidth(space: Client, clients: MPI.Comm, world: MPI.Comm, mib: int,
                    runs: int) -> dict:
    """Median seconds of dist_tput (on A) and dist_tget (on B, into ``out=`` and new)."""
    rank = world.rank
    times: dict[str, list[float]] = {"put": [], "get": [], "get_new": []}
    arr = test_array(mib) if rank in (A, B) else None
    fetched = np.empty_like(arr) if rank == B else None   # reused, as the raw get reuses one
    for run in range(runs + 1):   # first round warms up
        quiet_barrier(clients)
        if rank == A:
            t0 = time.perf_counter()
            space.dist_tput(f"bw/{run}", arr)
            times["put"].append(time.perf_counter() - t0)
            space.dist_tput(f"bw/{run}/again", arr)
        quiet_barrier(clients)
        if rank == B:
            t0 = time.perf_counter()
            space.dist_tget(f"bw/{run}", timeout=60, out=fetched)
            times["get"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            got = space.dist_tget(f"bw/{run}/again", timeout=60)
            times["get_new"].append(time.perf_counter() - t0)
            if run == 0 and not (np.array_equal(got, arr) and np.array_equal(fetched, arr)):
                raise SystemExit("dist_tget returned a different array")
            del got
    return {k: statistics.median(v[1:]) for k, v in times.items() if v}


def gather(comm: MPI.Comm, local: dict) -> dict:
    """Every rank's figures merged into one mapping."""
    merged: dict = {}
    for part in comm.allgather(local):
        merged.update(part)
    return merged


def report(world: MPI.Comm, mib: int, pp: tuple[float, float], ops: float, bw: dict) -> None:
    """Print the markdown table (rank A)."""
    gib = mib / 1024
    rate = {k: gib / v for k, v in bw.items()}
    print(f"tuplespace benchmark: {world.size} ranks, {len(SERVERS)} servers, "
          f"{MPI.Get_library_version().splitlines()[0].strip()}, median of {REPEATS}\n")
    print("| | tuple space | raw mpi4py | ratio |")
    print("|---|---|---|---|")
    slower = pp[0] / pp[1]
    verdict = "met" if slower <= PING_PONG_TARGET else "missed"
    print(f"| ping-pong round trip (A → server → B and back; raw: A ↔ B direct) | "
          f"{pp[0] * 1e6:.0f} µs | {pp[1] * 1e6:.1f} µs | {slower:.{0 if slower >= 10 else 1}f}x "
          f"(target ≤ {PING_PONG_TARGET:g}x: {verdict}) |")
    print(f"| operations/s, 1 server, 4 clients | {ops:,.0f} | | |")
    rows = (
        (f"`dist_tput`, {mib} MiB float32 over 4 servers (raw: 4 `Isend`s of the same "
         "chunks to the same 4 ranks), timed on the sender", "put", "raw_put"),
        ("`dist_tget` into a reused array (`out=`) (raw: 4 `Irecv`s from the same 4 ranks "
         "into a reused array), timed on the receiver", "get", "raw_get"),
        ("`dist_tget` into a new array (raw: the same into a new array)", "get_new",
         "raw_get_new"),
    )
    for label, ours, raw in rows:
        print(f"| {label} | {rate[ours]:.2f} GiB/s | {rate[raw]:.2f} GiB/s | "
              f"{rate[ours] / rate[raw]:.0%} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations, 64 MiB array")
    args = parser.parse_args()
    world = MPI.COMM_WORLD
    if world.size != NEEDED:
        if world.rank == 0:
            print(f"tuplespace_bench needs exactly {NEEDED} ranks (4 servers + 4 clients), "
                  f"found {world.size}: run  mpiexec -n {NEEDED} python {sys.argv[0]}",
                  file=sys.stderr)
        return 2
    mib = 64 if args.quick else 256
    raw = raw_bandwidth(world, mib, REPEATS)
    space_comm = world.Dup()
    is_server = world.rank in SERVERS
    clients = world.Split(0 if is_server else 1)
    if is_server:
        Server(space_comm, SERVERS).run()
        return 0
    space = Client(space_comm, SERVERS)
    pp_space, pp_raw = ping_pong(space, clients, world, 2000 if args.quick else 20000)
    n_ops = 5000 if args.quick else 20000
    ops = statistics.median(throughput(space, clients, n_ops) for _ in range(REPEATS))
    bw = gather(clients, {**raw, **space_bandwidth(space, clients, world, mib, REPEATS)})
    pp = clients.bcast((pp_space, pp_raw), root=A - len(SERVERS))
    if world.rank == A:
        report(world, mib, pp, ops, bw)
        space.shutdown()
    quiet_barrier(clients)
    space.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
