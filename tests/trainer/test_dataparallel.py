"""Data-parallel training: K ranks on slices of each global batch equal one rank on the
full batch, with one fused Allreduce per step (the checks run in mpi_dataparallel.py; on a
GPU, with the step replayed as CUDA graphs around the Allreduce, in mpi_dataparallel_gpu.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.helpers.launch import run_mpi
from trainer.backend import cupy_or_none
from trainer.parallel import fuse


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 4])
def test_data_parallel_equals_one_rank_on_the_full_batch(ranks):
    script = Path(__file__).with_name("mpi_dataparallel.py")
    done = run_mpi(ranks, [str(script)], timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"OK {ranks}" in done.stdout


@pytest.mark.mpi
@pytest.mark.gpu
@pytest.mark.skipif(cupy_or_none() is None, reason="CuPy with a CUDA GPU is not available")
def test_gpu_data_parallel_graphs_equal_eager_steps_and_one_rank():
    script = Path(__file__).with_name("mpi_dataparallel_gpu.py")
    done = run_mpi(2, [str(script)], timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OK 2" in done.stdout


def test_fuse_gives_views_into_one_buffer():
    arrays = [np.arange(6.0).reshape(2, 3), np.ones(4)]
    flat, views = fuse(arrays, np.zeros, np.float64, extra=2)
    assert flat.shape == (12,) and all(np.array_equal(v, a) for v, a in zip(views, arrays))
    views[1] += 1  # writing a view writes the flat buffer: nothing to pack before an Allreduce
    assert flat[6:10].tolist() == [2.0] * 4 and flat[10:].tolist() == [0.0, 0.0]
