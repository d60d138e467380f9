"""Test functions for benchmarks/search_quality.py, as worker ``run:`` functions of a trial.

Branin (2-D) and Hartmann-6 (6-D) are the usual global-optimization test functions
(Surjanovic and Bingham's Virtual Library of Simulation Experiments); both are minimized
and their global minima are known, so the simple regret of a search is its best value
minus :data:`BRANIN_MIN` or :data:`HARTMANN6_MIN`. Each ``run:`` function returns the
value as one number, the objective of a ``direction: minimize`` search.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

__all__ = ["branin", "hartmann6", "branin_trial", "hartmann6_trial", "BRANIN_MIN",
           "HARTMANN6_MIN", "BRANIN_MINIMISERS", "HARTMANN6_MINIMISER", "BRANIN_BOUNDS",
           "HARTMANN6_NAMES"]

#: Branin's three global minimisers (x1, x2) and its minimum.
BRANIN_MINIMISERS = ((-math.pi, 12.275), (math.pi, 2.275), (9.42478, 2.475))
BRANIN_MIN = 0.397887
#: The domain: x1 in [-5, 10], x2 in [0, 15].
BRANIN_BOUNDS = ((-5.0, 10.0), (0.0, 15.0))

#: Hartmann-6 on [0, 1]^6: its minimiser and minimum.
HARTMANN6_MINIMISER = (0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573)
HARTMANN6_MIN = -3.32237
HARTMANN6_NAMES = tuple(f"x{i}" for i in range(6))

_H6_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])
_H6_A = np.array([[10, 3, 17, 3.5, 1.7, 8],
                  [0.05, 10, 17, 0.1, 8, 14],
                  [3, 3.5, 1.7, 10, 17, 8],
                  [17, 8, 0.05, 10, 0.1, 14]])
_H6_P = 1e-4 * np.array([[1312, 1696, 5569, 124, 8283, 5886],
                         [2329, 4135, 8307, 3736, 1004, 9991],
                         [2348, 1451, 3522, 2883, 3047, 6650],
                         [4047, 8828, 8732, 5743, 1091, 381]])


def branin(x1: float, x2: float) -> float:
    """Branin-Hoo: ``(x2 - b x1^2 + c x1 - r)^2 + s (1 - t) cos(x1) + s``."""
    b, c, r = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 6.0
    s, t = 10.0, 1 / (8 * math.pi)
    return (x2 - b * x1 ** 2 + c * x1 - r) ** 2 + s * (1 - t) * math.cos(x1) + s


def hartmann6(x: Sequence[float]) -> float:
    """Hartmann-6: ``-sum_i alpha_i exp(-sum_j A_ij (x_j - P_ij)^2)``."""
    point = np.asarray(x, dtype=float)
    return float(-(_H6_ALPHA * np.exp(-((_H6_A * (point - _H6_P) ** 2).sum(axis=1)))).sum())


def branin_trial(trial: Any) -> float:
    """``run:`` function: Branin at the trial's ``x1``, ``x2``."""
    return branin(float(trial.params["x1"]), float(trial.params["x2"]))


def hartmann6_trial(trial: Any) -> float:
    """``run:`` function: Hartmann-6 at the trial's ``x0`` ... ``x5``."""
    params: Mapping[str, Any] = trial.params
    return hartmann6([float(params[name]) for name in HARTMANN6_NAMES])
