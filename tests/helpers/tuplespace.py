"""In-process tuple spaces for the tuple-space tests: server threads and clients over one
in-process network (no MPI)."""

from __future__ import annotations

import threading

from tuplespace import Client, InProcNetwork, Server


class InProcSpace:
    """``n_servers`` server threads plus ``n_clients`` clients over one in-process network."""

    def __init__(self, n_servers: int = 3, n_clients: int = 2, **server_kwargs) -> None:
        self.network = InProcNetwork(n_servers + n_clients)
        self.servers = list(range(n_servers))
        self.server_objs = [Server(self.network.endpoint(r), self.servers, **server_kwargs)
                            for r in self.servers]
        self.stats: list[dict] = []
        self.threads = [threading.Thread(target=lambda s=s: self.stats.append(s.run()), daemon=True)
                        for s in self.server_objs]
        for t in self.threads:
            t.start()
        self.clients = [Client(self.network.endpoint(n_servers + i), self.servers)
                        for i in range(n_clients)]

    def stop(self) -> None:
        """Shut the servers down through the first client and wait for their threads."""
        self.clients[0].shutdown(timeout=10)
        for t in self.threads:
            t.join(timeout=10)
            if t.is_alive():
                raise AssertionError("a server thread did not stop")

