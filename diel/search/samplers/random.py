"""``strategy: random``: independent draws, trial ``n`` a pure function of the seed and ``n``."""

from __future__ import annotations

from typing import Any

from diel.search.samplers.base import Sampler

__all__ = ["RandomSampler"]


class RandomSampler(Sampler):
    """Draws trial ``number`` from ``numpy.random.default_rng([seed, number])``
    (:meth:`SearchSpace.sample`), so a draw never depends on which trials ran before it:
    two runs with one seed draw the same trials, in either mode, and a resumed study
    continues the sequence. Results are not used."""

    def propose(self, number: int) -> dict[str, Any] | None:
        return self.space.sample(self.seed, number)
