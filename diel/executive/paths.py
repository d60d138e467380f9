"""Naming a path a user gave in a one-line message, whatever the path holds.

A path from a workflow file may be 5,000 characters long or hold a NUL or a newline;
quoted whole, it would make the one line of an error unreadable, or several lines.
"""

from __future__ import annotations

from pathlib import Path

from diel.limits import clip

__all__ = ["shown_path", "os_reason", "MAX_SHOWN_PATH"]

MAX_SHOWN_PATH = 300   # characters of a path quoted in a message (its start and end kept)


def shown_path(path: str | Path) -> str:
    """``path`` as a message quotes it: unprintable characters escaped (``\\x00``), at
    most :data:`MAX_SHOWN_PATH` characters (:func:`diel.limits.clip`)."""
    text = str(path)
    return clip(text if text.isprintable() else ascii(text)[1:-1], MAX_SHOWN_PATH)


def os_reason(error: OSError | ValueError) -> str:
    """Why the system refused a path, in a few words (``File name too long``, ``embedded
    null byte``): an OSError's ``strerror``, else the error's text."""
    return getattr(error, "strerror", None) or str(error)
