"""The Pareto front of a study of several objectives: its non-dominated trials.

One trial dominates another when it is at least as good in every objective and better in
at least one; the front is every trial no other dominates. Trials with equal values do
not dominate each other, so ties are on the front together (as in Optuna's
``best_trials``). A point lacking a value, or holding one that is not a finite number,
is on no front. Used by ``diel results --pareto``, ``diel studies`` and the search
master's final report, so that all three agree.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

__all__ = ["pareto_front", "DIRECTIONS"]

DIRECTIONS = ("maximize", "minimize")


def pareto_front(points: Sequence[Sequence[float | None]], directions: Sequence[str]) -> list[int]:
    """The indices, ascending, of the points of ``points`` that no other point
    dominates, each point holding one value per objective of ``directions`` (each
    ``maximize`` or ``minimize``). Points lacking a finite value are left out;
    :class:`ValueError` for a point of another length, an unknown direction or none.

    Points are visited best first in lexicographic order (every objective turned to
    "smaller is better"), so a point can only be dominated by one visited before it, and
    then by one already on the front: each point is compared with the front so far only.
    """
    if not directions:
        raise ValueError("a Pareto front needs at least one objective")
    for direction in directions:
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be maximize or minimize, got {direction!r}")
    signs = np.array([1.0 if d == "minimize" else -1.0 for d in directions])
    kept: list[int] = []
    rows: list[Sequence[float]] = []
    for index, point in enumerate(points):
        if len(point) != len(directions):
            raise ValueError(f"point {index} has {len(point)} values for {len(directions)} "
                             "objectives")
        if all(_finite(value) for value in point):
            kept.append(index)
            rows.append(point)   # type: ignore[arg-type]
    if not kept:
        return []
    costs = np.asarray(rows, dtype=float).reshape(len(kept), len(directions)) * signs
    order = np.lexsort(costs.T[::-1])
    front = np.empty_like(costs)
    size = 0
    chosen: list[int] = []
    for row in order:
        cost = costs[row]
        if size:
            ahead = front[:size]
            if np.any(np.all(ahead <= cost, axis=1) & np.any(ahead < cost, axis=1)):
                continue
        front[size] = cost
        size += 1
        chosen.append(kept[row])
    return sorted(chosen)


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and \
        math.isfinite(value)
