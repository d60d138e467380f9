"""Log set-up for a diel process: every line says which world rank wrote it."""

from __future__ import annotations

import logging
import sys

__all__ = ["setup_logging", "LEVELS"]

LEVELS = ("debug", "info", "warning", "error")


def setup_logging(level: str, world_rank: int | None = None) -> None:
    """Send diel's logs to stderr at ``level``, prefixed with the world rank when known."""
    prefix = "" if world_rank is None else f"[rank {world_rank}] "
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(
        f"%(asctime)s {prefix}%(name)s %(levelname)s: %(message)s", datefmt="%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
