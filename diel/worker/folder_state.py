"""A program's checkpoint folder as a checkpoint's state, and back.

A program trial checkpoints by writing files in ``$DIEL_CHECKPOINT_DIR``, then the line
``{"checkpoint": step}``; the worker keeps them as one state, ``{relative path: bytes}``
(regular files only, in subfolders too; links and other special files are left out),
which a resume writes back into the fresh folder of the next attempt. Large files are
kept out of the pickle stream like any large ``bytes`` value
(:mod:`diel.checkpoints.snapshot`).

The worker reads the folder some time after the line was written, while the program
runs on. A checkpoint is taken only as it was at its line: a file or folder changed
after the line's time (the program already writing its next checkpoint), or while it is
read, makes :func:`folder_state` refuse it (:class:`FolderChanged`), and that checkpoint
is skipped; the next one counts.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath
from typing import Any

__all__ = ["folder_state", "write_folder_state", "FolderChanged"]


class FolderChanged(ValueError):
    """The checkpoint folder changed after the line that made it a checkpoint."""


def folder_state(folder: Path, as_of_ns: int) -> dict[str, bytes]:
    """The regular files under ``folder``, by their path relative to it (``/``-separated),
    as they were at ``as_of_ns`` (``st_mtime_ns`` time); :class:`FolderChanged` when a
    file or folder was changed since (or while it was read); OSError as raised."""
    state: dict[str, bytes] = {}
    for root, folders, files in os.walk(folder):
        _unchanged_since(Path(root), os.lstat(root), as_of_ns)
        folders.sort()
        for name in sorted(files):
            path = Path(root) / name
            before = os.lstat(path)
            if not stat.S_ISREG(before.st_mode):
                continue
            _unchanged_since(path, before, as_of_ns)
            data = path.read_bytes()
            after = os.lstat(path)
            if (after.st_ino, after.st_size, after.st_mtime_ns) != \
                    (before.st_ino, before.st_size, before.st_mtime_ns) or len(data) != after.st_size:
                raise FolderChanged(f"{path} changed while it was read")
            state[path.relative_to(folder).as_posix()] = data
    return state


def _unchanged_since(path: Path, status: os.stat_result, as_of_ns: int) -> None:
    if status.st_mtime_ns > as_of_ns:
        raise FolderChanged(f"{path} changed after the checkpoint's line was written")


def write_folder_state(state: Any, folder: Path) -> None:
    """Write the files of a :func:`folder_state` under ``folder``. ValueError for a state
    that is not one (not a checkpoint of a program), or a path outside ``folder``."""
    if not isinstance(state, dict) or not all(
            isinstance(name, str) and isinstance(data, bytes) for name, data in state.items()):
        raise ValueError("it is not a program's checkpoint folder (a mapping of file names "
                         "to their bytes)")
    for name, data in state.items():
        relative = PurePosixPath(name)
        if relative.is_absolute() or ".." in relative.parts or not relative.parts:
            raise ValueError(f"it names a file outside the checkpoint folder: {name!r}")
        path = folder.joinpath(*relative.parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
