"""Ranking trial dicts (as :meth:`~diel.results.Results.trials` gives them) in Python, the
way the reader ranks them in the database: best objective first, or a study's Pareto
front. The search master's final report gets its best trials from its storage
(:meth:`~diel.results.Storage.best`: these, unless the storage ranks in its query) and
ranks a Pareto front here, whatever the storage.
"""

from __future__ import annotations

from typing import Any, Sequence

from diel.results._pareto import finite_number, pareto_front
from diel.results._storage import ObjectiveSpec

__all__ = ["best_first", "pareto_trials"]


def best_first(trials: Sequence[dict[str, Any]], direction: str) -> list[dict[str, Any]]:
    """``trials`` best ``objective`` first for ``direction`` (``maximize`` or
    ``minimize``), those without a finite one last, by number among equals: the order
    of :meth:`Results.trials` within a study."""
    sign = -1.0 if direction == "maximize" else 1.0

    def rank(trial: dict[str, Any]) -> tuple[bool, float, int]:
        value = trial["objective"]
        found = finite_number(value)
        return (not found, sign * value if found else 0.0, trial["number"])
    return sorted(trials, key=rank)


def pareto_trials(trials: Sequence[dict[str, Any]], specs: Sequence[ObjectiveSpec],
             chosen: Sequence[int] | None = None, keep_order: bool = False,
             ) -> list[dict[str, Any]]:
    """The trials of ``trials`` (of a study of the objectives ``specs``) that no other
    of them dominates over the objectives at positions ``chosen`` (default: all): best
    first in the first chosen objective, by number among equals, or in the order given
    with ``keep_order``."""
    chosen = list(range(len(specs))) if chosen is None else list(chosen)
    texts = [specs[i][0] for i in chosen]
    points = [[(trial.get("objectives") or {}).get(text) for text in texts] for trial in trials]
    front = [trials[i] for i in pareto_front(points, [specs[i][1] for i in chosen])]
    if not keep_order:
        text, direction = specs[chosen[0]]
        sign = -1.0 if direction == "maximize" else 1.0
        front.sort(key=lambda trial: (sign * trial["objectives"][text], trial["number"]))
    return front
