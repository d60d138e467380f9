"""Parameter importance by fANOVA, computed by Optuna's ``FanovaImportanceEvaluator``
(a random forest of scikit-learn fitted to the trials, its variance split by parameter;
Hutter et al., ICML 2014).

The study's ``ok`` trials are handed to an in-memory Optuna study as finished trials
(:func:`optuna.trial.create_trial`), each parameter with the distribution its axis says:
a log or linear float, an integer, or the categories of a categorical one. The bounds
are those the trials span. The forest is seeded, so one study gives the same figure
every time.
"""

from __future__ import annotations

from typing import Any, Sequence

from diel.plot._extra import require
from diel.plot._study import Axis

__all__ = ["fanova", "METHOD", "SEED"]

SEED = 0
METHOD = "fANOVA (Optuna's FanovaImportanceEvaluator, 64 trees, seed 0)"


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
