"""Which checkpoint a resumed trial starts from: the task's ``restore``, read back checked.

The master hands a resumed trial its latest durable checkpoint, and the older ones it
still keeps, newest first (docs/contracts.md, "Search protocol"). :func:`resume_point`
tries the newest from the tuple space's copy in memory first (a resume in the same job:
no disk), then from its file; a checkpoint that cannot be used (missing, damaged, another
checksum than recorded: :class:`~diel.checkpoints.CorruptCheckpoint`) is skipped for the
one before it, with one warning line naming the file and the problem. With none usable
the trial starts from scratch, and a warning says so. The checkpoint may be another
trial's (population-based training's exploit: the task's ``restore`` names the donor as
``trial``); the memory copy given is then the donor's.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping

from diel.checkpoints import CorruptCheckpoint, Snapshot, read, unpack
from diel.limits import LOG_TEXT_CHARS, clip

__all__ = ["resume_point", "MemoryCopy", "Warn"]

log = logging.getLogger("diel.worker")

#: ``memory_copy(nbytes) -> image | None``: writable memory (an array, a private memory
#: map) holding the tuple space's copy of the trial's latest checkpoint, or None when
#: none of that size is kept.
MemoryCopy = Callable[[int], Any]
#: ``warn(line)``: where the warnings of a resume go (the worker's log).
Warn = Callable[[str], None]


def resume_point(restore: Mapping[str, Any] | None, number: int,
                 memory_copy: MemoryCopy | None, warn: Warn) -> tuple[int, Snapshot] | None:
    """``(step, snapshot)`` of the newest usable checkpoint of ``restore`` (the task's
    ``restore``: None, or ``{"step", "path", "nbytes", "checksum", "older": [...]}``) for
    trial ``number``; None when it is None or no checkpoint of it can be read."""
    if restore is None:
        return None
    candidates = [restore, *restore.get("older", ())]
    for index, checkpoint in enumerate(candidates):
        if index == 0 and memory_copy is not None:
            snapshot = _from_memory(checkpoint, number, memory_copy)
            if snapshot is not None:
                return checkpoint["step"], snapshot
        try:
            return checkpoint["step"], read(checkpoint["path"], checkpoint["checksum"])
        except CorruptCheckpoint as e:
            following = candidates[index + 1] if index + 1 < len(candidates) else None
            then = (f"resuming from the one of step {following['step']} instead" if following
                    else "no older checkpoint is left: the trial starts from scratch")
            warn(clip(f"trial {number}: {e}; {then}", LOG_TEXT_CHARS))
    return None


def _from_memory(checkpoint: Mapping[str, Any], number: int,
                 memory_copy: MemoryCopy) -> Snapshot | None:
    """The checkpoint from the tuple space's copy where it lies (no copy: the state's
    arrays are views of it), its header checked against the recorded checksum (its bytes
    were checked when they were put: no pass over them here); None when the space holds
    none (or another one): the file serves then."""
    image = memory_copy(checkpoint["nbytes"])
    if image is None:
        return None
    try:
        return unpack(image, checkpoint["checksum"], f"{checkpoint['path']} (copy in memory)",
                      whole_pass=False)
    except CorruptCheckpoint as e:   # an older copy of the same size: not this checkpoint's
        log.debug("trial %d: the copy in memory is not checkpoint %s (%s); reading the file",
                  number, checkpoint["path"], e.problem)
        return None
