"""``strategy: grid``: every point of the space, once, in the space's fixed order."""

from __future__ import annotations

from typing import Any, Iterator, Mapping, Sequence

from diel.search.samplers.base import Observation, Sampler
from diel.search.space import GRID_KINDS, SearchSpace, param_key

__all__ = ["GridSampler"]


class GridSampler(Sampler):
    """Enumerates the grid (parameters in YAML order, the last one varying fastest),
    skipping the points the study already has (finished or left running): a resumed grid
    goes on with the points not in the database, and a grown space adds its new points."""

    kinds = GRID_KINDS
    draws = False   # it enumerates

    @classmethod
    def size(cls, space: SearchSpace) -> int | None:
        """Every point of the grid."""
        return space.grid_size()

    def __init__(self, space: SearchSpace, directions: Sequence[str], seed: int,
                 options: Mapping[str, Any], mode: str) -> None:
        super().__init__(space, directions, seed, options, mode)
        self._taken: set[str] = set()
        self._points: Iterator[dict[str, Any]] = iter(space.grid())

    def restore(self, trials: Sequence[Observation]) -> None:
        self._taken = {param_key(t.params) for t in trials}

    def propose(self, number: int) -> dict[str, Any] | None:
        for params in self._points:
            if param_key(params) not in self._taken:
                return params
        return None
