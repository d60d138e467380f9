"""Planning the distributed store: how an array is cut into chunks over the data servers.

The array's bytes are cut at element boundaries into one chunk per data server, sizes
differing by at most one element, so every server gets the same number of bytes (to
within one element). The server that gets the larger chunks rotates with the tag, so
many small arrays do not all load the first server. The plan is what the metadata
server records: ``[(server rank, chunk tag, byte offset, nbytes), ...]``.

A chunk travels with the meta :func:`chunk_meta` (its size), so that a server knows, as
the chunk arrives, whether to receive it into a memory file (:mod:`tuplespace.memfiles`).
"""

from __future__ import annotations

import zlib
from typing import Sequence

from .tags import RESERVED

__all__ = ["plan_chunks", "meta_tag", "Chunk", "chunk_meta", "chunk_nbytes"]

Chunk = tuple  # (server rank, chunk tag, byte offset, nbytes)
_CHUNK = "chunk"


def chunk_meta(nbytes: int) -> tuple[str, int]:
    """The meta a chunk of ``nbytes`` bytes is put with."""
    return _CHUNK, nbytes


def chunk_nbytes(meta: object) -> int | None:
    """A chunk's size from the meta it was put with; None for any other value."""
    if type(meta) is tuple and len(meta) == 2 and meta[0] == _CHUNK and type(meta[1]) is int:
        return meta[1]
    return None


def meta_tag(tag: str) -> str:
    """The internal tag under which the metadata server keeps ``tag``'s placement."""
    return f"{RESERVED}dist/{tag}"


def plan_chunks(tag: str, nbytes: int, itemsize: int, servers: Sequence[int],
                uid: str) -> list[Chunk]:
    """Chunks for ``nbytes`` bytes of ``itemsize``-byte elements over ``servers``.

    ``uid`` makes the chunk tags unique to this put. Empty arrays have no chunks.
    """
    itemsize = max(itemsize, 1)
    count = len(servers)
    elements = nbytes // itemsize
    base, extra = divmod(elements, count)
    start = zlib.crc32(tag.encode("utf-8", "surrogatepass")) % count
    plan: list[Chunk] = []
    offset = 0
    for i in range(count):
        size = (base + (1 if i < extra else 0)) * itemsize
        if size == 0:
            continue
        server = servers[(start + i) % count]
        plan.append((server, f"{RESERVED}chunk/{uid}/{i}", offset, size))
        offset += size
    return plan
