"""MPI: 3 servers (ranks 0-2), the other ranks clients, each putting PER values then taking PER.

Client c puts (c, i) on tag q<c % 3>/items ... and takes as many from the same tag; rank 3
gathers what every client took and prints ``OK`` if each tuple arrived exactly once and
each consumer saw each producer's values in order.
"""

import sys
from collections import Counter

from mpi4py import MPI

from tuplespace import Client, Server, wait_until

PER = 300
world = MPI.COMM_WORLD
space_comm = world.Dup()
servers = [0, 1, 2]
clients = world.Split(0 if world.rank in servers else 1)
if world.rank in servers:
    Server(space_comm, servers).run()
    sys.exit(0)
space = Client(space_comm, servers)
tag = f"q{clients.rank % 3}/items"
for i in range(PER):
    space.tput(tag, (clients.rank, i))
got = [space.tget(tag, timeout=60) for _ in range(PER)]
everything = clients.gather(got, root=0)
if clients.rank == 0:
    counts = Counter(v for part in everything for v in part)
    ok = len(counts) == PER * clients.size and set(counts.values()) == {1}
    for part in everything:
        for producer in {p for p, _ in part}:
            seq = [i for p, i in part if p == producer]
            ok = ok and seq == sorted(seq)
    print("OK" if ok else f"FAIL {len(counts)} distinct, counts {Counter(counts.values())}", flush=True)
    space.shutdown()
req = clients.Ibarrier()
wait_until(req.Test)
space.close()
