"""Data-parallel slicing: which rows of each global batch a rank computes, and with what weight.

With ``comm`` every rank shuffles alike and walks the same global batches of
``batch_size`` rows; rank r computes the contiguous rows ``[start_r, stop_r)`` of each
(:func:`slice_bounds`: slices that differ by at most one row; a rank may get none in a
small last batch and then contributes zero gradients). Its loss gradient is weighted by
``rows_r / rows``, so the SUM of the ranks' gradients is the full-batch mean gradient,
also for uneven slices. On one rank the slice is the whole batch, with weight 1.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["RankSlice", "rank_slices", "slice_bounds"]


def slice_bounds(rows: int, rank: int, size: int) -> tuple[int, int]:
    """``(start, stop)`` of ``rank``'s slice of ``rows`` rows cut into ``size`` near-equal parts
    (the first ``rows % size`` ranks get one row more; a rank may get none)."""
    base, extra = divmod(rows, size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


@dataclass(frozen=True)
class RankSlice:
    """One global batch as this rank sees it: ``batch`` (its number in the epoch), this
    rank's rows ``[start, stop)`` of the epoch's sample order, and ``weight``, the share
    of the global batch those rows are."""

    batch: int
    start: int
    stop: int
    weight: float

    @property
    def rows(self) -> int:
        """How many rows this rank computes (0: an empty slice)."""
        return self.stop - self.start


def rank_slices(samples: int, batch_size: int, rank: int = 0, size: int = 1) -> Iterator[RankSlice]:
    """This rank's slice of every global batch of an epoch over ``samples`` samples, in order
    (the last batch holds the remainder)."""
    for batch, start in enumerate(range(0, samples, batch_size)):
        stop = min(samples, start + batch_size)
        lo, hi = slice_bounds(stop - start, rank, size)
        yield RankSlice(batch, start + lo, start + hi, (hi - lo) / (stop - start))
