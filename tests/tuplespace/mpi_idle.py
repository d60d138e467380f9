"""MPI: CPU used by an idle server and by a client blocked in tget (rank 0 server, rank 1 client).

After one round trip, the server idles while the client sleeps outside MPI; then the
client blocks in one long ``tget``. Each side's CPU share is sampled over ``WINDOWS``
windows of ``WINDOW`` seconds (after ``SETTLE`` seconds, which include the brief fast
polling that follows any traffic) by a thread that wakes once per window, and the median
is printed, so one window disturbed by another process does not decide the result:
``SERVER <median cpu fraction> <should_stop calls> <seconds> <windows...>`` and
``CLIENT <median cpu fraction> <windows...>``.
"""

import statistics
import sys
import threading
import time

from mpi4py import MPI

from tuplespace import Client, Server

WINDOWS = 5
WINDOW = 1.0
SETTLE = 0.5
SPAN = SETTLE + WINDOWS * WINDOW

world = MPI.COMM_WORLD
space_comm = world.Dup()


def sample_windows(out: list[float]) -> threading.Thread:
    """Start a thread that appends this process's CPU share in each window to ``out``."""
    def sample() -> None:
        time.sleep(SETTLE)
        wall, cpu = time.monotonic(), time.process_time()
        for _ in range(WINDOWS):
            time.sleep(WINDOW)
            wall1, cpu1 = time.monotonic(), time.process_time()
            out.append((cpu1 - cpu) / (wall1 - wall))
            wall, cpu = wall1, cpu1
    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    return thread


def summary(windows: list[float]) -> str:
    return f"{statistics.median(windows):.4f} " + " ".join(f"{w:.4f}" for w in windows)


if world.rank == 0:
    calls: list[int] = []
    windows: list[float] = []
    world.recv(source=1)   # the client starts: the server idles after its first round trip
    wall0 = time.monotonic()
    sampler = sample_windows(windows)
    Server(space_comm, [0]).run(should_stop=lambda: calls.append(1) and False)
    sampler.join()
    seconds = time.monotonic() - wall0
    median, each = summary(windows).split(" ", 1)
    print(f"SERVER {median} {len(calls)} {seconds:.3f} {each}", flush=True)
    sys.exit(0)

world.send(None, dest=0)
space = Client(space_comm, [0])
space.tput("idle/warm", 1)
space.tget("idle/warm")
time.sleep(SPAN + 0.1)    # the server idles while this rank sleeps outside MPI
windows = []
sampler = sample_windows(windows)
try:
    space.tget("idle/never", timeout=SPAN + 0.1)
except TimeoutError:
    pass
sampler.join()
print(f"CLIENT {summary(windows)}", flush=True)
space.shutdown()
space.close()
