"""Runs every contract of contracts.py over MPI: 3 servers (ranks 0-2), clients a=3, b=4.

Rank 3 prints one line ``RESULTS <json>``: contract name -> "ok" or the error text.
"""

import json
import sys
import traceback
from pathlib import Path

from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parent))
from contracts import CONTRACTS, SERVERS  # noqa: E402

from tuplespace import Client, Server, wait_until  # noqa: E402

world = MPI.COMM_WORLD
space_comm = world.Dup()
servers = list(range(SERVERS))
clients = world.Split(0 if world.rank in servers else 1)
if world.rank in servers:
    Server(space_comm, servers).run()
    sys.exit(0)
space = Client(space_comm, servers)
role = "a" if clients.rank == 0 else "b"
results = {}
for name, contract in CONTRACTS.items():
    req = clients.Ibarrier()
    wait_until(req.Test)
    try:
        contract(role, space)
        results[name] = "ok"
    except Exception:
        results[name] = traceback.format_exc()
merged = clients.gather(results, root=0)
if role == "a":
    out = {name: next((r[name] for r in merged if r[name] != "ok"), "ok") for name in CONTRACTS}
    print("RESULTS " + json.dumps(out), flush=True)
    space.shutdown()
space.close()
