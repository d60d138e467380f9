"""MPI: tuplespace.module.main(ctx) with a stand-in for diel's ctx (rank 0 serves, rank 1 uses).

The stop request travels as a world message (as an executive might do it); after the
server stops, the client's next tget must raise ServerStoppedError, not hang.
"""

import logging
import sys
import types

from mpi4py import MPI

from tuplespace import Client, ServerStoppedError
from tuplespace.module import main

logging.basicConfig(level=logging.DEBUG, stream=sys.stdout, format="%(name)s %(message)s")
world = MPI.COMM_WORLD
space_comm = world.Dup()
if world.rank == 0:
    ctx = types.SimpleNamespace(
        space_comm=space_comm, space_servers=[0], config={"max_message_bytes": 4096},
        log=logging.getLogger("diel.tuplespace"),
        stop_requested=lambda: world.iprobe(source=1, tag=99))
    stats = main(ctx)
    world.recv(source=1, tag=99)
    print(f"STATS {stats['values_left']} {stats['waiters_released']}", flush=True)
    sys.exit(0)
space = Client(space_comm, [0])
for i in range(3):
    space.tput("mod/x", i)
assert space.tget("mod/x") == 0
try:
    space.tput("mod/big", bytes(10_000))
except Exception as e:
    print(f"TOO_LARGE {type(e).__name__}: {e}", flush=True)
world.send(None, dest=0, tag=99)
try:
    space.tget("mod/never")
except ServerStoppedError as e:
    print(f"STOPPED {e}", flush=True)
