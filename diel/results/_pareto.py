"""The Pareto front of a study of several objectives: its non-dominated trials.

One trial dominates another when it is at least as good in every objective and better in
at least one; the front is every trial no other dominates. Trials with equal values do
not dominate each other, so ties are on the front together (as in Optuna's
``best_trials``). A point lacking a value, or holding one that is not a finite number,
is on no front. :class:`ParetoFront` keeps a front up to date as trials finish (the
search master's progress); :func:`pareto_front` picks the front of a list of points
(``diel results --pareto``, ``diel studies``, the master's final report), so that all
of them agree.
"""

from __future__ import annotations

import math
from typing import Generic, Hashable, Sequence, TypeVar

__all__ = ["ParetoFront", "pareto_front", "DIRECTIONS", "finite_number"]

DIRECTIONS = ("maximize", "minimize")
Key = TypeVar("Key", bound=Hashable)


class ParetoFront(Generic[Key]):
    """The non-dominated points among those added so far, each under a key (a trial
    number, say). Adding a point compares it with the front only: a point once dominated
    stays dominated, so the front of every point added is the front of the front and the
    new point."""

    def __init__(self, directions: Sequence[str]) -> None:
        if not directions:
            raise ValueError("a Pareto front needs at least one objective")
        for direction in directions:
            if direction not in DIRECTIONS:
                raise ValueError(f"direction must be maximize or minimize, got {direction!r}")
        self._signs = tuple(1.0 if d == "minimize" else -1.0 for d in directions)
        self._front: dict[Key, tuple[float, ...]] = {}   # key -> costs (smaller is better)

    def add(self, key: Key, point: Sequence[float | None]) -> bool:
        """Add ``point`` (one value per objective) under ``key``; True when it is on the
        front now. A point lacking a finite value is left out (False);
        :class:`ValueError` for a point of another length."""
        if len(point) != len(self._signs):
            raise ValueError(f"point {key!r} has {len(point)} values for {len(self._signs)} "
                             "objectives")
        if not all(finite_number(value) for value in point):
            return False
        costs = tuple(sign * float(value) for sign, value in zip(self._signs, point))  # type: ignore[arg-type]
        if any(_dominates(member, costs) for member in self._front.values()):
            return False
        self._front = {k: member for k, member in self._front.items()
                       if not _dominates(costs, member)}
        self._front[key] = costs
        return True

    @property
    def keys(self) -> list[Key]:
        """The keys of the points on the front, in the order they were added."""
        return list(self._front)

    def __len__(self) -> int:
        return len(self._front)


def pareto_front(points: Sequence[Sequence[float | None]], directions: Sequence[str]) -> list[int]:
    """The indices, ascending, of the points of ``points`` that no other point
    dominates, each point holding one value per objective of ``directions`` (each
    ``maximize`` or ``minimize``). Points lacking a finite value are left out;
    :class:`ValueError` for a point of another length, an unknown direction or none."""
    front: ParetoFront[int] = ParetoFront(directions)
    for index, point in enumerate(points):
        front.add(index, point)
    return sorted(front.keys)


def _dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    """Costs ``a`` dominate ``b``: nowhere larger, somewhere smaller."""
    return all(x <= y for x, y in zip(a, b)) and a != b


def finite_number(value: object) -> bool:
    """A real number (not a bool) that is neither NaN nor infinite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and \
        math.isfinite(value)
