"""Tuple-space benchmark: latency, throughput and distributed-store bandwidth vs raw MPI.

Run with exactly 8 ranks (4 servers + 4 clients)::

    mpiexec -n 8 python benchmarks/tuplespace_bench.py [--quick]

Ranks 0-3 are tuple servers, ranks 4-7 clients. It prints, side by side:

* ping-pong through the space (rank 4 tputs, rank 5 tgets and tputs back, rank 4 tgets)
  vs a raw mpi4py ``send``/``recv`` ping-pong of the same value between ranks 4 and 5;
* operations per second one server sustains with 4 clients (each tputs then tgets);
* ``dist_tput``/``dist_tget`` of a 256 MiB float32 array over the 4 servers vs a raw
  ``Send``/``Recv`` of the same array between ranks 4 and 5, in GiB/s and % of raw;
  ``dist_tget`` both into a reused array (``out=``, as the raw ``Recv`` reuses its buffer)
  and into a new one (which pays the page faults of a fresh 256 MiB allocation).

Idle ranks wait in non-blocking barriers with backoff, so they do not steal cores.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from mpi4py import MPI

from tuplespace import Client, Server, wait_until

NEEDED = 8
SERVERS = [0, 1, 2, 3]
A, B = 4, 5


def quiet_barrier(comm: MPI.Comm) -> None:
    """A barrier that sleeps instead of spinning (MPICH's Barrier spins)."""
    req = comm.Ibarrier()
    wait_until(req.Test)


def best_of(runs: int, fn) -> float:
    """The smallest of ``runs`` timings of ``fn()`` (seconds, as fn returns them)."""
    return min(fn() for _ in range(runs))


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
    return best_of(3, space_run), best_of(3, raw_run)


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


def bandwidth(space: Client, clients: MPI.Comm, world: MPI.Comm, mib: int, runs: int) -> dict:
    """Seconds for dist_tput, dist_tget and a raw Send/Recv of a ``mib`` MiB array (on A/B)."""
    rank = world.rank
    times = {"put": [], "get": [], "get_new": [], "raw": []}
    arr = np.random.default_rng(0).random(mib * 2**18, dtype=np.float32) if rank in (A, B) else None
    out = np.empty_like(arr) if rank == B else None        # reused, as raw Recv reuses it
    fetched = np.empty_like(arr) if rank == B else None
    for run in range(runs + 1):   # first round warms up
        quiet_barrier(clients)
        if rank == A:
            t0 = time.perf_counter()
            world.Send(arr, B, 12)
            world.recv(source=B, tag=13)
        elif rank == B:
            t0 = time.perf_counter()
            world.Recv(out, A, 12)
            times["raw"].append(time.perf_counter() - t0)
            world.send(None, A, 13)
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
    local = {k: min(v[1:]) for k, v in times.items() if len(v) > 1}
    merged: dict = {}
    for part in clients.allgather(local):
        merged.update(part)
    return merged


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
    space_comm = world.Dup()
    is_server = world.rank in SERVERS
    clients = world.Split(0 if is_server else 1)
    if is_server:
        Server(space_comm, SERVERS).run()
        return 0
    space = Client(space_comm, SERVERS)
    pp_n = 2000 if args.quick else 20000
    pp_space, pp_raw = ping_pong(space, clients, world, pp_n)
    ops = throughput(space, clients, 5000 if args.quick else 20000)
    mib = 64 if args.quick else 256
    bw = bandwidth(space, clients, world, mib, 1 if args.quick else 3)
    pp = clients.bcast((pp_space, pp_raw), root=A - len(SERVERS))
    if world.rank == A:
        gib = mib / 1024
        raw, put, get = gib / bw["raw"], gib / bw["put"], gib / bw["get"]
        get_new = gib / bw["get_new"]
        print(f"tuplespace benchmark: {world.size} ranks, {len(SERVERS)} servers, "
              f"{MPI.Get_library_version().splitlines()[0].strip()}")
        print(f"{'measure':<34}{'tuplespace':>14}{'raw MPI':>14}{'ratio':>12}")
        print(f"{'ping-pong round trip (us)':<34}{pp[0] * 1e6:>14.1f}{pp[1] * 1e6:>14.1f}"
              f"{pp[0] / pp[1]:>11.2f}x")
        print(f"{'ops/s, 1 server, 4 clients':<34}{ops:>14,.0f}{'-':>14}{'-':>12}")
        print(f"{f'dist_tput {mib} MiB f32 (GiB/s)':<34}{put:>14.2f}{raw:>14.2f}{put / raw:>11.0%}")
        print(f"{f'dist_tget {mib} MiB, out= (GiB/s)':<34}{get:>14.2f}{raw:>14.2f}{get / raw:>11.0%}")
        print(f"{f'dist_tget {mib} MiB, new array':<34}{get_new:>14.2f}{raw:>14.2f}{get_new / raw:>11.0%}")
        space.shutdown()
    quiet_barrier(clients)
    space.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
