"""The tuple space as a diel module: ``main(ctx)`` serves until the executive says stop.

Settings (``ctx.config``, all optional):

* ``max_message_bytes``: refuse values bigger than this (clients learn it on first
  contact and raise :class:`~tuplespace.errors.MessageTooLargeError`); default no limit.
* ``stop_check_interval``: seconds between calls to ``ctx.stop_requested()`` while
  idle (each may probe MPI); default 0.05.
"""

from __future__ import annotations

from typing import Any

from .server import STOP_CHECK_INTERVAL, Server

__all__ = ["main"]


def main(ctx: Any) -> dict:
    """Serve on ``ctx.space_comm`` as one of ``ctx.space_servers`` until stop is requested."""
    config = dict(ctx.config or {})
    unknown = set(config) - {"max_message_bytes", "stop_check_interval"}
    if unknown:
        raise ValueError(f"tuplespace module: unknown settings {sorted(unknown)}; "
                         "expected max_message_bytes, stop_check_interval")
    server = Server(ctx.space_comm, ctx.space_servers,
                    max_message_bytes=config.get("max_message_bytes"), log=ctx.log,
                    stop_check_interval=config.get("stop_check_interval", STOP_CHECK_INTERVAL))
    ctx.log.debug("tuplespace server rank %d serving (%d servers)", server.rank, len(server.servers))
    return server.run(should_stop=ctx.stop_requested)
