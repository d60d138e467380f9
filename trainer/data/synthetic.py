"""Synthetic data of any shape, for benchmarks and tests that need no real data."""

from __future__ import annotations

import numpy as np

__all__ = ["synthetic"]


def synthetic(n: int, shape: tuple[int, ...] = (784,), classes: int = 10, seed: int = 0,
              dtype: str | np.dtype = "float32") -> tuple[np.ndarray, np.ndarray]:
    """``n`` inputs of per-sample ``shape`` and integer labels in ``[0, classes)``.

    Inputs are class prototypes plus noise, so a model can learn them (a benchmark whose
    loss goes nowhere would hide bugs); values lie roughly in [0, 1] like scaled pixels.
    """
    if n <= 0 or classes <= 0:
        raise ValueError(f"n and classes must be positive, got n={n}, classes={classes}")
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, size=n)
    prototypes = rng.random((classes, *shape), dtype=np.float32)
    x = prototypes[labels]
    x += rng.standard_normal(x.shape, dtype=np.float32) * np.float32(0.3)
    return x.astype(dtype, copy=False), labels
