"""Data-parallel slicing on its own: the ranks' slices of every global batch cover it once,
differ by at most one row, and their weights add up to the whole batch."""

from __future__ import annotations

import pytest

from trainer.slicing import rank_slices, slice_bounds


@pytest.mark.parametrize("rows, size", [(25, 4), (3, 4), (8, 2), (0, 3)])
def test_slices_cover_the_batch_and_differ_by_at_most_one_row(rows, size):
    bounds = [slice_bounds(rows, rank, size) for rank in range(size)]
    assert bounds[0][0] == 0 and bounds[-1][1] == rows
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    lengths = [hi - lo for lo, hi in bounds]
    assert max(lengths) - min(lengths) <= 1


@pytest.mark.parametrize("samples, batch, size", [(203, 25, 4), (10, 4, 3), (7, 7, 1), (5, 100, 2)])
def test_every_rank_sees_every_global_batch_and_together_they_cover_the_epoch(samples, batch, size):
    per_rank = [list(rank_slices(samples, batch, rank, size)) for rank in range(size)]
    batches = -(-samples // batch)
    assert all(len(slices) == batches for slices in per_rank)  # no rank skips a step (collectives)
    covered = sorted(i for slices in per_rank for s in slices for i in range(s.start, s.stop))
    assert covered == list(range(samples))
    for b in range(batches):
        parts = [slices[b] for slices in per_rank]
        assert {p.batch for p in parts} == {b}
        assert sum(p.weight for p in parts) == pytest.approx(1.0)
        rows = min(batch, samples - b * batch)
        assert all(p.weight == p.rows / rows for p in parts)


def test_one_rank_takes_whole_batches_with_weight_one():
    slices = list(rank_slices(10, 4))
    assert [(s.start, s.stop, s.weight) for s in slices] == [(0, 4, 1.0), (4, 8, 1.0), (8, 10, 1.0)]


def test_a_small_last_batch_leaves_some_ranks_empty():
    last = [list(rank_slices(203, 25, rank, 4))[-1] for rank in range(4)]
    assert [s.rows for s in last] == [1, 1, 1, 0] and last[3].weight == 0.0
