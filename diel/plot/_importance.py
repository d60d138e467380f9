"""Parameter importance by fANOVA, computed by Optuna's ``FanovaImportanceEvaluator``
(a random forest of scikit-learn fitted to the trials, its variance split by parameter;
Hutter et al., ICML 2014).

The study's ``ok`` trials are handed to an in-memory Optuna study as finished trials
(:func:`optuna.trial.create_trial`), each parameter with the distribution its axis says:
a log or linear float, an integer, or the categories of a categorical one. The bounds
are those the trials span. The forest is seeded, so one study gives the same figure
every time.

The shares always sum to 1, even when the parameters say nothing about the objective
(pure noise puts most of it on a continuous parameter, which offers the forest the most
splits), so :func:`explained` says how much of the objective a forest of the same size
predicts from the parameters at all: its out-of-bag R².
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Sequence

from diel.plot._extra import require
from diel.plot._study import Axis

__all__ = ["fanova", "explained", "METHOD", "SEED", "FEWEST_TO_FIT"]

SEED = 0
TREES = 64   # Optuna's FanovaImportanceEvaluator's default, and its depth
METHOD = f"fANOVA (Optuna's FanovaImportanceEvaluator, {TREES} trees, seed {SEED})"
FEWEST_TO_FIT = 10   # below this many trials an out-of-bag R² says nothing


def fanova(axes: Sequence[Axis], points: Sequence[Sequence[float]],
           values: Sequence[float]) -> dict[str, float]:
    """The importance of each parameter of ``axes`` (summing to 1, largest first) for the
    objective ``values``, one per point of ``points`` (each point the positions of its
    parameters on ``axes``). A parameter that never varied has importance 0."""
    optuna = require("optuna", "the importance plot")
    require("sklearn", "the importance plot (fANOVA's random forest)")
    distributions = {axis.name: _distribution(optuna, axis, [p[i] for p in points])
                     for i, axis in enumerate(axes)}
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "A new study created" line
    try:
        study = optuna.create_study()
        study.add_trials([optuna.trial.create_trial(
            params={axis.name: _param(axis, point[i]) for i, axis in enumerate(axes)},
            distributions=distributions, value=value) for point, value in zip(points, values)])
        evaluator = optuna.importance.FanovaImportanceEvaluator(seed=SEED)
        found = optuna.importance.get_param_importances(study, evaluator=evaluator)
    finally:
        optuna.logging.set_verbosity(verbosity)
    return {name: float(value) for name, value in found.items()}


def explained(points: Sequence[Sequence[float]], values: Sequence[float]) -> float | None:
    """The out-of-bag R² of a seeded random forest of fANOVA's size predicting ``values``
    from ``points``: 1 when the parameters decide the objective, about 0 or below when
    they say nothing of it. None for fewer than :data:`FEWEST_TO_FIT` trials or an
    objective that never varied."""
    require("sklearn", "the importance plot (fANOVA's random forest)")
    from sklearn.ensemble import RandomForestRegressor

    if len(values) < FEWEST_TO_FIT or len(set(values)) < 2:
        return None
    forest = RandomForestRegressor(n_estimators=TREES, max_depth=TREES, oob_score=True,
                                   random_state=SEED)
    with warnings.catch_warnings():   # a trial in every tree's sample: far below 10 trials
        warnings.simplefilter("ignore", UserWarning)
        forest.fit(points, values)
    score = float(forest.oob_score_)
    return score if math.isfinite(score) else None


def _distribution(optuna: Any, axis: Axis, positions: list[float]) -> Any:
    distributions = optuna.distributions
    if axis.scale == "categorical":
        return distributions.CategoricalDistribution(list(range(len(axis.choices))))
    low, high = min(positions), max(positions)
    if axis.scale == "int":
        return distributions.IntDistribution(int(low), int(high))
    return distributions.FloatDistribution(low, high, log=axis.scale == "log")


def _param(axis: Axis, position: float) -> Any:
    """A point's value as its distribution holds it (a category's index, an integer)."""
    return int(position) if axis.scale in ("categorical", "int") else position
