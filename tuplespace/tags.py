"""Tag checks and the placement of tags on servers.

Placement rule: a tag lives on the server picked by a stable hash (CRC-32) of its
*namespace*, the part before the first ``/`` (the whole tag when it has none). So
``study/task``, ``study/report`` and ``study/prune/7`` share one server, and
``tget_any`` over tags of one namespace (or a prefix that names one, ``"study/"``)
is answered by that single server. The rule does not depend on the server count, so
a program that works with one server works with several.
"""

from __future__ import annotations

import zlib
from typing import Sequence

from .errors import BadTagError

__all__ = ["check_tag", "namespace", "TagPlacement", "RESERVED"]

RESERVED = "\x00"   # internal tags (distributed-store chunks and metadata) start with it


def check_tag(tag: object, what: str = "tag") -> str:
    """Return ``tag`` if it is a usable user tag, else raise :class:`BadTagError`."""
    if type(tag) is str and tag and tag[0] != RESERVED:
        return tag
    if not isinstance(tag, str):
        raise BadTagError(f"{what} must be a non-empty str, got {type(tag).__name__} {tag!r}")
    if not tag:
        raise BadTagError(f"{what} must be a non-empty str, got ''")
    if tag[0] == RESERVED:
        raise BadTagError(f"{what} {tag!r} starts with '\\x00', which is reserved for internal tags")
    return str(tag)


def namespace(tag: str) -> str:
    """The part of ``tag`` before the first ``/`` (all of it when there is none)."""
    return tag.split("/", 1)[0]


class TagPlacement:
    """Maps a tag to the world rank of the server that holds it."""

    def __init__(self, servers: Sequence[int]) -> None:
        self.servers = list(servers)
        if not self.servers:
            raise ValueError("servers must list at least one server rank")
        self._cache: dict[str, int] = {}

    def home(self, tag: str) -> int:
        """The server rank for ``tag`` (by the hash of its namespace)."""
        ns = tag.split("/", 1)[0]
        rank = self._cache.get(ns)
        if rank is None:
            rank = self.servers[zlib.crc32(ns.encode("utf-8", "surrogatepass")) % len(self.servers)]
            if len(self._cache) < 65536:
                self._cache[ns] = rank
        return rank
