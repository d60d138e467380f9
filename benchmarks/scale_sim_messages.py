"""What a tuple-space message costs, measured through the real tuple server and client over
the in-process transport (``tuplespace.InProcNetwork``: a server thread, the client in
this thread), for benchmarks/scale_sim.py.

Measured: the caller's CPU for one ``tput`` of a task (encoding and sending); the round
trip of a ``tget_many`` that finds its value waiting (wall time); the server's CPU per
request (the process's CPU minus the client thread's, over puts and takes). Not
included: MPI itself (envelopes, progress, the polling sleeps that make a round trip
through the space cost hundreds of microseconds on an oversubscribed machine;
docs/tuplespace.md): pass a round trip measured by ``benchmarks/tuplespace_bench.py``
with ``--rtt-us`` to use that instead.
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any

from scale_sim_world import Messages
from tuplespace import Client, InProcNetwork, Server

__all__ = ["measure_messages"]


def measure_messages(task: dict[str, Any], samples: int = 2000, repeats: int = 3) -> Messages:
    """Costs of one message carrying ``task``: each the median of ``repeats``
    measurements over ``samples`` messages (the round trip a median, the CPU costs means)."""
    runs = [_measure(task, samples) for _ in range(repeats)]
    return Messages(*(statistics.median(costs) for costs in zip(*(
        (m.put_s, m.rtt_s, m.server_s) for m in runs))))


def _measure(task: dict[str, Any], samples: int) -> Messages:
    network = InProcNetwork(2)
    server = Server(network.endpoint(0), [0])
    thread = threading.Thread(target=server.run, name="scale-sim-server", daemon=True)
    thread.start()
    client = Client(network.endpoint(1), [0])
    try:
        client.tput("warm", task)
        client.tget("warm")
        cpu0, own0 = time.process_time(), time.thread_time()
        for _ in range(samples):
            client.tput("sim/task", task)
        put_s = (time.thread_time() - own0) / samples
        trips = []
        for _ in range(samples):
            started = time.perf_counter()
            client.tget_many("sim/task", 1)
            trips.append(time.perf_counter() - started)
        own = time.thread_time() - own0
        server_s = max(0.0, (time.process_time() - cpu0) - own) / (2 * samples)
    finally:
        client.shutdown(timeout=10)
        thread.join(timeout=10)
    return Messages(put_s=put_s, rtt_s=statistics.median(trips), server_s=server_s)
