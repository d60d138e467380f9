"""A trial's state as data: serialized once, written durably in the background, read back
checked. No MPI and no SQL here: the worker and the search master build on these names
(docs/workers.md, "Checkpoints"; docs/contracts.md for the reports).

* :func:`take` serializes any picklable state (pickle protocol 5; NumPy arrays, CPU torch
  tensors and large ``bytes`` kept out of band and copied once into one buffer the
  :class:`Snapshot` owns) and returns: the trial may change its arrays at once.
  :meth:`Snapshot.load` gives the state back.
* :func:`write` makes a snapshot one file, durably: written under a temporary name in
  the final folder, fsynced, renamed over the final name, the folder fsynced. A crash
  leaves the old file or the new one under the final name, never part of one; at most a
  temporary file (:func:`~diel.checkpoints.layout.is_temporary`) beside it.
* The file: a header (magic ``\\x89DIELCK\\n``, format version 1, the lengths of the
  pickle stream and of each buffer, the checksum, algorithm included:
  ``crc32:1a2b3c4d``), the pickle stream, the buffers, each 64-byte aligned. The
  checksum covers all of it but itself. :func:`read` verifies it and raises
  :class:`CorruptCheckpoint` (one line: the file and what is wrong) for a missing,
  short, truncated, damaged or foreign file, or another checkpoint than the expected one.
  :func:`unpack` checks a file's bytes already in memory the same way, without a copy
  (or, ``whole_pass=False``, all but the pass over the bytes: for a copy checked once
  already and since only moved between processes, as the tuple space's is).
* :class:`DurableWriter` writes submitted snapshots in order on one background thread per
  process and calls back when each is durable (:class:`Written`), or failed (one line;
  never an exception in the trial). A snapshot still queued is dropped for a newer one
  of the same trial.
* :mod:`~diel.checkpoints.layout`: ``<dir>/<study>/trial-<n>/step-<k>.ckpt``, and back.

Loading a checkpoint unpickles it, which runs code, as ``torch.load`` does without
``weights_only``: read only checkpoints your own searches wrote.
"""

from diel.lazy import names_from

# Names load on first use, as diel.results's do: the search master uses only
# :mod:`~diel.checkpoints.layout`, and the files, snapshot and writer modules were some
# 2 ms of its start, which every rank waits for.
_HOMES = {
    "Snapshot": "snapshot", "take": "snapshot",
    "Written": "files", "write": "files", "read": "files", "unpack": "files",
    "CorruptCheckpoint": "files",
    "DurableWriter": "writer",
    "study_folder": "layout", "checkpoint_path": "layout", "parse": "layout",
}

__all__ = list(_HOMES)
__getattr__ = names_from(__name__, _HOMES)
