"""What both renderers draw alike: a colour per trial status and the titles."""

from __future__ import annotations

from typing import Any

__all__ = ["STATUS_COLOURS", "objective_title", "importance_trials", "importance_fit", "SIZE",
           "DPI", "COLOURMAP", "edge_offsets", "importance_left_out"]

# ok green, pruned orange, failed red, running grey, paused purple (colour-blind safe
# pairs from matplotlib's tab10, which Plotly shows the same).
STATUS_COLOURS = {"ok": "#2ca02c", "pruned": "#ff7f0e", "failed": "#d62728",
                  "running": "#7f7f7f", "paused": "#9467bd"}
COLOURMAP = "viridis"
SIZE = (7.0, 4.2)   # inches, matplotlib; Plotly gets the same at DPI pixels an inch
DPI = 100


def objective_title(objective: dict[str, Any]) -> str:
    """``accuracy - 0.001 * time (maximize)``."""
    return f"{objective['expression']} ({objective['direction']})"


def importance_trials(data: dict[str, Any]) -> str:
    """``120 ok trials``, or ``a random sample of 2,000 of 10,000 ok trials``."""
    used, there = data["trials"], data["ok_trials"]
    return (f"{used} ok trials" if used == there
            else f"a random sample of {used:,} of {there:,} ok trials")


def importance_left_out(data: dict[str, Any]) -> str:
    """The importance plot's word on the parameters it was not computed over (those only
    some trials have): ``; left out, not in every trial: svc_c, rf_depth``, or nothing."""
    left = data.get("left_out") or []
    return f"; left out, not in every trial: {', '.join(left)}" if left else ""


def importance_fit(data: dict[str, Any]) -> str:
    """What the importance plot's out-of-bag R² says of its shares (they sum to 1
    whether or not the parameters explain anything)."""
    score = data["explained"]
    if score is None:
        return "too few ok trials to tell how much of the objective the parameters explain"
    if score < 0.1:
        return (f"out-of-bag R² {score:.2f}: the parameters barely predict it; "
                "the shares may be noise")
    return f"out-of-bag R² {score:.2f}: the parameters predict {score:.0%} of its variance"


def edge_offsets(edges: list[dict[str, Any]], span: float) -> list[float]:
    """How far to the side to draw each exploit edge of a lineage (``step``: where it
    is), so that the edges at one step (vertical lines through the same members) lie
    side by side instead of on top of each other: 2% of the ``span`` of steps apart,
    centred on their step."""
    at: dict[Any, int] = {}
    for edge in edges:
        at[edge["step"]] = at.get(edge["step"], 0) + 1
    seen: dict[Any, int] = {}
    out = []
    for edge in edges:
        k = seen.get(edge["step"], 0)
        seen[edge["step"]] = k + 1
        out.append((k - (at[edge["step"]] - 1) / 2) * 0.02 * (span or 1))
    return out
