"""Tuple-space tags and message shapes of the search (docs/contracts.md, "Search
protocol"), named in one place for the master and the workers."""

from __future__ import annotations

from typing import Any

__all__ = ["task_tag", "report_tag", "prune_tag", "is_report"]


def task_tag(study: str) -> str:
    """Where the master puts ``{"trial", "params"}`` tasks, and one ``None`` per worker."""
    return f"{study}/task"


def report_tag(study: str) -> str:
    """Where workers put ``{"kind": "epoch" | "result", ...}`` reports."""
    return f"{study}/report"


def prune_tag(study: str, trial: int) -> str:
    """Where the master puts ``True`` to stop ``trial`` early."""
    return f"{study}/prune/{trial}"


def is_report(value: Any) -> bool:
    """True for a report dict; False for anything else, e.g. ``try_tget``'s EMPTY."""
    return isinstance(value, dict) and value.get("kind") in ("epoch", "result")
