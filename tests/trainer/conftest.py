"""Fixtures for the trainer suite: one ``xp``/device parameter so every test that can runs
on NumPy and, where CuPy sees a GPU, on CuPy too (GPU cases skip cleanly otherwise)."""

from __future__ import annotations

import numpy as np
import pytest

from trainer.backend import cupy_or_none


@pytest.fixture(params=["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def device(request: pytest.FixtureRequest) -> str:
    """Device name; the ``gpu`` case is skipped when CuPy or a GPU is missing."""
    if request.param == "gpu" and cupy_or_none() is None:
        pytest.skip("CuPy with a CUDA GPU is not available")
    return request.param


@pytest.fixture
def xp(device: str):
    """The array module for ``device``."""
    return np if device == "cpu" else cupy_or_none()
