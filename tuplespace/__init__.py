"""Linda-style tuple space over MPI: ``tag -> FIFO of values`` held by server ranks.

Any mpi4py program can use it::

    from mpi4py import MPI
    import numpy as np
    from tuplespace import Client, Server

    comm = MPI.COMM_WORLD.Dup()          # a communicator kept for the space
    servers = [0]
    if comm.rank in servers:
        Server(comm, servers).run()      # serves until a client calls shutdown()
    else:
        space = Client(comm, servers)
        if comm.rank == 1:
            space.tput("job/x", {"lr": 0.1})
            space.tput("job/w", np.arange(10.0))     # arrays travel as raw buffers
            space.dist_tput("job/big", np.ones((1000, 1000), np.float32))
        else:
            params = space.tget("job/x")             # blocks until a value arrives
            tag, w = space.tget_any(prefix="job/w")
            big = space.dist_tget("job/big", timeout=30)
            space.shutdown()                         # stop the servers
        space.close()

Tags are placed on servers by a hash of their namespace (the part before the first
``/``); see :mod:`tuplespace.tags`. In diel, the builtin module ``tuplespace`` runs the
server (:mod:`tuplespace.module`) and ``ctx.space`` is a connected client.
"""

from .backoff import Backoff, wait_until
from .client import EMPTY, Client
from .errors import (BadTagError, ClientClosedError, MessageTooLargeError, RemoteError,
                     ServerStoppedError, SpaceTimeoutError, TupleSpaceError, ValueEncodingError)
from .server import Server
from .transport import InProcNetwork, Transport

__all__ = [
    "Client", "Server", "EMPTY", "Transport", "InProcNetwork", "Backoff", "wait_until",
    "TupleSpaceError", "BadTagError", "ValueEncodingError", "MessageTooLargeError",
    "SpaceTimeoutError", "ServerStoppedError", "ClientClosedError", "RemoteError",
]
