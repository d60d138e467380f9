"""Fixtures for the tuple-space tests: in-process spaces, and the MPI contract run."""

from __future__ import annotations

import json
import threading
from typing import Iterator

import pytest

from tests.support import run_mpi
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


@pytest.fixture
def inproc() -> Iterator[InProcSpace]:
    space = InProcSpace()
    yield space
    if any(t.is_alive() for t in space.threads):
        space.stop()


@pytest.fixture(scope="session")
def mpi_contract_results() -> dict:
    proc = run_mpi(5, ["tests/tuplespace/mpi_contracts.py"], timeout=90)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULTS ")]
    if proc.returncode != 0 or not lines:
        raise AssertionError(f"MPI contract run failed (rc={proc.returncode}):\n"
                             f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULTS "):])
