"""``strategy: random``: independent draws, trial ``n`` a pure function of the seed and ``n``."""

from __future__ import annotations

import math
import zlib
from typing import Any, Mapping

import numpy as np

from diel.search.samplers.base import Sampler

__all__ = ["RandomSampler"]


class RandomSampler(Sampler):
    """Draws trial ``number`` from ``numpy.random.default_rng([seed, number])``
    (:meth:`SearchSpace.sample`), so a draw never depends on which trials ran before it:
    two runs with one seed draw the same trials, in either mode, and a resumed study
    continues the sequence. Results are not used.

    A suggested parameter (define-by-run) is drawn from
    ``default_rng([seed, number, crc32(name)])``: a pure function of the seed, the trial
    and the name too, so a trial resumed after a crash gets the values it had."""

    suggests = True

    def propose(self, number: int) -> dict[str, Any] | None:
        return self.space.sample(self.seed, number)

    def suggest(self, number: int, name: str, distribution: Mapping[str, Any]) -> Any:
        rng = np.random.default_rng([self.seed, number, zlib.crc32(name.encode())])
        return draw(distribution, rng)


def draw(distribution: Mapping[str, Any], rng: np.random.Generator) -> Any:
    """One value of ``distribution`` (diel's JSON form), uniform over it (over the
    logarithm with ``log``; on the grid of ``step`` when given)."""
    if distribution["kind"] == "categorical":
        choices = distribution["choices"]
        return choices[int(rng.integers(len(choices)))]
    low, high, step = distribution["low"], distribution["high"], distribution.get("step")
    if distribution["kind"] == "int":
        if distribution.get("log"):
            value = math.exp(rng.uniform(math.log(low - 0.5), math.log(high + 0.5)))
            return int(min(high, max(low, round(value))))
        return int(low + step * int(rng.integers((high - low) // step, endpoint=True)))
    if step is not None:
        count = math.floor((high - low) / step + 1e-9)
        return float(min(high, low + step * int(rng.integers(count, endpoint=True))))
    if distribution.get("log"):
        return float(math.exp(rng.uniform(math.log(low), math.log(high))))
    return float(rng.uniform(low, high))
