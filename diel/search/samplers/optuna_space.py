"""diel's space kinds as Optuna distributions, and parameter values both ways.

=======================  ===============================================  ==================
diel kind                Optuna sees                                      back in diel
=======================  ===============================================  ==================
``uniform: [lo, hi]``    ``FloatDistribution(lo, hi)``                    the float
``loguniform: [lo, hi]`` ``FloatDistribution(lo, hi, log=True)``          the float
``int: [lo, hi]``        ``IntDistribution(lo, hi)``                      the integer
``range``, ``logrange``  ``IntDistribution(0, n - 1)``: the point's index  ``points[index]``
``values``, ``choice``   ``CategoricalDistribution(0 .. n - 1)``: index   ``points[index]``
=======================  ===============================================  ==================

A ``range``'s points are evenly spaced and a ``logrange``'s evenly spaced in log scale,
so the index keeps their order and scale for the model, and a proposal is always one of
the points exactly as diel wrote them (``0.3``, never ``0.30000000000000004``), which a
resumed study needs to recognise its trials. ``values`` and ``choice`` are unordered
categories (give ordered numbers as a ``range`` or ``logrange``).

Parameters a trial's function suggests (define-by-run, not declared) are Optuna's own
distributions of the call (:func:`optuna_distribution`), their values as Optuna gives them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from diel.search.space import Param, SearchSpace, param_key

__all__ = ["Axis", "axes", "optuna_distribution", "suggest"]

_CATEGORICAL = ("values", "choice")


@dataclass(frozen=True)
class Axis:
    """One parameter as Optuna sees it."""

    param: Param

    @property
    def name(self) -> str:
        return self.param.name

    def distribution(self) -> Any:
        """The Optuna distribution of this parameter."""
        from optuna.distributions import CategoricalDistribution, FloatDistribution, \
            IntDistribution

        param = self.param
        if param.points is not None:
            if param.kind in _CATEGORICAL:
                return CategoricalDistribution(list(range(len(param.points))))
            return IntDistribution(0, len(param.points) - 1)
        if param.kind == "int":
            return IntDistribution(int(param.low), int(param.high))
        return FloatDistribution(param.low, param.high, log=param.kind == "loguniform")

    def suggest(self, trial: Any) -> Any:
        """Ask Optuna's ``trial`` for this parameter (its fixed value when the trial was
        enqueued with one); the value in Optuna's terms."""
        param = self.param
        if param.points is not None:
            if param.kind in _CATEGORICAL:
                return trial.suggest_categorical(self.name, list(range(len(param.points))))
            return trial.suggest_int(self.name, 0, len(param.points) - 1)
        if param.kind == "int":
            return trial.suggest_int(self.name, int(param.low), int(param.high))
        return trial.suggest_float(self.name, param.low, param.high,
                                   log=param.kind == "loguniform")

    def to_diel(self, value: Any) -> Any:
        """Optuna's value as the parameter's value in diel."""
        if self.param.points is not None:
            return self.param.points[int(value)]
        return int(value) if self.param.kind == "int" else float(value)

    def to_optuna(self, value: Any) -> Any:
        """A value of this parameter in diel (one of its points, for grid kinds) in
        Optuna's terms."""
        if self.param.points is None:
            return value
        key = param_key({"v": value})
        return next(i for i, point in enumerate(self.param.points)
                    if param_key({"v": point}) == key)


def axes(space: SearchSpace) -> list[Axis]:
    """The space's parameters, in its order."""
    return [Axis(param) for param in space.params]


def optuna_distribution(distribution: Mapping[str, Any]) -> Any:
    """A suggested parameter's distribution (diel's JSON form,
    :mod:`diel.search.distributions`) as Optuna's."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, \
        IntDistribution

    if distribution["kind"] == "categorical":
        return CategoricalDistribution(list(distribution["choices"]))
    if distribution["kind"] == "int":
        return IntDistribution(distribution["low"], distribution["high"],
                               log=bool(distribution.get("log")), step=distribution.get("step", 1))
    return FloatDistribution(distribution["low"], distribution["high"],
                             log=bool(distribution.get("log")), step=distribution.get("step"))


def suggest(trial: Any, name: str, distribution: Mapping[str, Any]) -> Any:
    """Ask Optuna's ``trial`` for suggested parameter ``name`` (define-by-run), through
    the ``suggest_*`` call the distribution stands for; its enqueued value when it has
    one (a replayed trial)."""
    if distribution["kind"] == "categorical":
        return trial.suggest_categorical(name, list(distribution["choices"]))
    if distribution["kind"] == "int":
        return trial.suggest_int(name, distribution["low"], distribution["high"],
                                 step=distribution.get("step", 1), log=bool(distribution.get("log")))
    return trial.suggest_float(name, distribution["low"], distribution["high"],
                               step=distribution.get("step"), log=bool(distribution.get("log")))
