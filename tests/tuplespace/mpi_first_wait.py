"""MPI: a client's first request sleeps on the doorbell while it waits (rank 0 server,
rank 1 a client whose first call is a take, rank 2 putting the value 0.2 s later).

Rank 1 counts, from the end of its HELLO (the first contact, which tells the server its
bell and gets the server's rung WELCOME back), the polling pauses of its transport's
backoff and how its bell waits ended. Prints ``FIRST <polling pauses> <rung> <timed out>
<welcomed>``; ``welcomed`` is 0 where the take went out with no HELLO before it.
"""

import time

from mpi4py import MPI

from wait_counts import client_of_rank_0, count_waits

LATE = 0.2   # seconds rank 2 waits before it puts the value

space = client_of_rank_0()
if MPI.COMM_WORLD.rank == 2:
    time.sleep(LATE)
    space.tput("late", "here")
    raise SystemExit(0)

counts = count_waits(space)
counts["welcomed"] = 0
welcome = space._welcome


def counted_welcome(*args, **kwargs):
    found = welcome(*args, **kwargs)
    # from here on: the take's own wait
    counts.update({"polling": 0, "rung": 0, "timed out": 0, "welcomed": 1})
    return found


space._welcome = counted_welcome
assert space.tget("late") == "here"
print(f"FIRST {counts['polling']} {counts['rung']} {counts['timed out']} {counts['welcomed']}",
      flush=True)
space.shutdown()
space.close()
