"""Where a checkpoint lives: ``<dir>/<study>/trial-<n>/step-<k>.ckpt``, and back.

``<dir>`` is the search's checkpoint folder. A study's name becomes one folder name:
characters other than letters, digits and ``-_.~`` are percent-encoded (``my study`` ->
``my%20study``, ``a/b`` -> ``a%2Fb``), and so is a leading dot, so that no name is
``..``, hidden, or a path of several folders. A file being written has a temporary
name beside its final one (``.step-<k>.ckpt.<pid>-<random>.tmp``); a crash can leave
such a file behind, never a partial file under a final name (:func:`is_temporary`
tells the leftovers apart).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote

__all__ = ["Location", "study_folder", "checkpoint_path", "temporary_path", "is_temporary",
           "parse"]

SUFFIX = ".ckpt"
_TRIAL = re.compile(r"trial-(0|[1-9][0-9]*)")
_STEP = re.compile(r"step-(0|[1-9][0-9]*)" + re.escape(SUFFIX))
_TEMPORARY = re.compile(r"\.step-(0|[1-9][0-9]*)" + re.escape(SUFFIX) + r"\.[0-9]+-[0-9a-f]+\.tmp")


@dataclass(frozen=True)
class Location:
    """What a checkpoint's path says: its study, trial number and step."""

    study: str
    trial: int
    step: int


def study_folder(root: str | os.PathLike[str], study: str) -> Path:
    """``<root>/<study>``, the study's name made one safe folder name (module docstring)."""
    if not isinstance(study, str) or not study:
        raise ValueError(f"a study's checkpoint folder needs a non-empty study name, got {study!r}")
    name = quote(study, safe="")
    if name.startswith("."):
        name = "%2E" + name[1:]
    return Path(root) / name


def checkpoint_path(folder: str | os.PathLike[str], trial: int, step: int) -> Path:
    """``<folder>/trial-<trial>/step-<step>.ckpt``; ``folder`` is a :func:`study_folder`."""
    for what, number in (("trial", trial), ("step", step)):
        if isinstance(number, bool) or not isinstance(number, int) or number < 0:
            raise ValueError(f"a checkpoint's {what} must be an int >= 0, got {number!r}")
    return Path(folder) / f"trial-{trial}" / f"step-{step}{SUFFIX}"


def temporary_path(path: str | os.PathLike[str]) -> Path:
    """A fresh temporary name beside ``path``, for writing it before the rename (the
    random part from ``os.urandom``, as ``secrets.token_hex`` makes it: importing
    ``secrets``, with ``hashlib``, ``hmac`` and ``random``, cost each worker rank 3 ms)."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}-{os.urandom(4).hex()}.tmp")


def is_temporary(path: str | os.PathLike[str]) -> bool:
    """True for a checkpoint file a writer had not finished (left by a crash when it
    outlives its writer): safe to delete once no writer runs."""
    return _TEMPORARY.fullmatch(Path(path).name) is not None


def parse(path: str | os.PathLike[str]) -> Location:
    """The study, trial and step of a checkpoint's path (its last three parts); ValueError
    naming ``path`` when it is not ``.../<study>/trial-<n>/step-<k>.ckpt``."""
    parts = Path(path).parts
    trial = _TRIAL.fullmatch(parts[-2]) if len(parts) >= 3 else None
    step = _STEP.fullmatch(parts[-1]) if len(parts) >= 3 else None
    if trial is None or step is None or parts[-3] in ("", "/", ".", ".."):
        raise ValueError(f"{path}: not a checkpoint's path (expected "
                         f"<dir>/<study>/trial-<n>/step-<k>{SUFFIX})")
    return Location(unquote(parts[-3]), int(trial.group(1)), int(step.group(1)))
