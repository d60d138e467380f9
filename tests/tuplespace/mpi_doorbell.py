"""MPI: after a first exchange, a client waiting for a server's reply sleeps on its
doorbell instead of polling (rank 0 server, ranks 1 and 2 clients).

Rank 1 and rank 2 ping-pong ``ROUNDS`` values through the space after a few warm-up
rounds; rank 1 counts, over the measured rounds, the polling pauses of its transport's
backoff (none expected: every wait is on the bell) and how its bell waits ended.
Prints ``BELL <polling pauses> <rung> <timed out> <rounds> <median round trip us>``.
"""

import statistics
import time

from mpi4py import MPI

from wait_counts import client_of_rank_0, count_waits

WARM_UP = 5
ROUNDS = 200

space = client_of_rank_0()
if MPI.COMM_WORLD.rank == 2:
    for _ in range(WARM_UP + ROUNDS):
        space.tput("pong", space.tget("ping"))
    raise SystemExit(0)

for i in range(WARM_UP):
    space.tput("ping", i)
    space.tget("pong")
counts = count_waits(space)
trips = []
for i in range(ROUNDS):
    started = time.perf_counter()
    space.tput("ping", i)
    space.tget("pong")
    trips.append(time.perf_counter() - started)
print(f"BELL {counts['polling']} {counts['rung']} {counts['timed out']} {ROUNDS} "
      f"{statistics.median(trips) * 1e6:.0f}", flush=True)
space.shutdown()
space.close()
