"""MPI: CPU used by an idle server and by a client blocked in tget (rank 0 server, rank 1 client).

Prints ``SERVER <cpu fraction> <should_stop calls> <seconds>`` and ``CLIENT <cpu fraction>``.
"""

import sys
import time

from mpi4py import MPI

from tuplespace import Client, Server

world = MPI.COMM_WORLD
space_comm = world.Dup()
if world.rank == 0:
    calls = []
    wall0, cpu0 = time.monotonic(), time.process_time()
    Server(space_comm, [0]).run(should_stop=lambda: calls.append(1) and False)
    wall, cpu = time.monotonic() - wall0, time.process_time() - cpu0
    print(f"SERVER {cpu / wall:.4f} {len(calls)} {wall:.3f}", flush=True)
    sys.exit(0)
space = Client(space_comm, [0])
space.tput("idle/warm", 1)
space.tget("idle/warm")
time.sleep(0.6)    # the server idles
wall0, cpu0 = time.monotonic(), time.process_time()
try:
    space.tget("idle/never", timeout=1.5)
except TimeoutError:
    pass
wall, cpu = time.monotonic() - wall0, time.process_time() - cpu0
print(f"CLIENT {cpu / wall:.4f}", flush=True)
space.shutdown()
space.close()
