"""Distributions of define-by-run parameters (``trial.suggest_*``) in diel's JSON form,
and how a ``suggest_*`` call is checked against a declared ``space:`` parameter.

A distribution is a plain mapping, stored with each trial (``trials.distributions``) and
sent between worker and master: ``{"kind": "float", "low", "high", "log", "step"}``,
``{"kind": "int", "low", "high", "log", "step"}`` or ``{"kind": "categorical",
"choices": [...]}`` (a float's ``step`` only when it has one). The checks follow Optuna's (``low <= high``, a log scale needs
``low > 0`` and no step, choices are distinct JSON scalars), so an objective that runs
under Optuna runs here. This module has no dependencies: the worker imports it.
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping, Sequence

__all__ = ["float_distribution", "int_distribution", "categorical_distribution",
           "checked_distribution", "declared_form", "disagreement", "describe", "contains",
           "MAX_CHOICES"]

KINDS = ("float", "int", "categorical")
MAX_CHOICES = 10_000   # choices of one categorical distribution at most


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number, got {value!r}")
    return value


def float_distribution(low: Any, high: Any, step: Any = None, log: Any = False) -> dict[str, Any]:
    """``suggest_float(name, low, high, step=, log=)``'s distribution (ValueError as Optuna)."""
    low, high = float(_number(low, "low")), float(_number(high, "high"))
    if low > high:
        raise ValueError(f"low <= high is required, got low={low!r}, high={high!r}")
    if log and step is not None:
        raise ValueError("step and log=True cannot be used together")
    if log and low <= 0:
        raise ValueError(f"a log scale needs low > 0, got low={low!r}")
    if step is not None and _number(step, "step") <= 0:
        raise ValueError(f"step must be > 0, got {step!r}")
    distribution = {"kind": "float", "low": low, "high": high, "log": bool(log)}
    if step is not None:
        distribution["step"] = float(step)
    return distribution


def int_distribution(low: Any, high: Any, step: Any = 1, log: Any = False) -> dict[str, Any]:
    """``suggest_int(name, low, high, step=, log=)``'s distribution (ValueError as Optuna)."""
    for what, value in (("low", low), ("high", high), ("step", step)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{what} must be an int, got {value!r}")
    if low > high:
        raise ValueError(f"low <= high is required, got low={low!r}, high={high!r}")
    if step <= 0:
        raise ValueError(f"step must be > 0, got {step!r}")
    if log and (step != 1 or low < 1):
        raise ValueError("log=True needs step=1 and low >= 1")
    return {"kind": "int", "low": low, "high": high, "log": bool(log), "step": step}


def categorical_distribution(choices: Sequence[Any]) -> dict[str, Any]:
    """``suggest_categorical(name, choices)``'s distribution: distinct JSON scalars."""
    if isinstance(choices, (str, bytes)) or not isinstance(choices, Sequence) or not choices:
        raise ValueError(f"choices must be a non-empty list, got {choices!r}")
    if len(choices) > MAX_CHOICES:
        raise ValueError(f"{len(choices)} choices; at most {MAX_CHOICES} are taken")
    seen = set()
    for choice in choices:
        if not (choice is None or isinstance(choice, (bool, int, float, str))) or (
                isinstance(choice, float) and not math.isfinite(choice)):
            raise ValueError(f"choices must be numbers, strings, booleans or None, got {choice!r}")
        key = _key(choice)
        if key in seen:
            raise ValueError(f"duplicate choice {choice!r}")
        seen.add(key)
    return {"kind": "categorical", "choices": list(choices)}


def checked_distribution(value: Any) -> dict[str, Any]:
    """A distribution received from elsewhere (a worker's request, a stored row),
    rebuilt through the constructors above: ValueError when it is not one."""
    if not isinstance(value, Mapping) or value.get("kind") not in KINDS:
        raise ValueError(f"expected a distribution with kind {', '.join(KINDS)}; got "
                         f"{str(value)[:200]}")
    if value["kind"] == "categorical":
        return categorical_distribution(value.get("choices"))
    if value["kind"] == "int":
        return int_distribution(value.get("low"), value.get("high"), value.get("step", 1),
                                value.get("log", False))
    return float_distribution(value.get("low"), value.get("high"), value.get("step"),
                              value.get("log", False))


def contains(distribution: Mapping[str, Any], value: Any) -> bool:
    """True when ``value`` is one of ``distribution``'s values (float ends within rounding)."""
    if distribution["kind"] == "categorical":
        return _key(value) in {_key(choice) for choice in distribution["choices"]}
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if distribution["kind"] == "int" and not isinstance(value, int):
        return False
    low, high = distribution["low"], distribution["high"]
    return low <= value <= high or math.isclose(value, low) or math.isclose(value, high)


def describe(distribution: Mapping[str, Any]) -> str:
    """The ``suggest_*`` call a distribution stands for, e.g. ``suggest_float(1e-10,
    10000000000.0, log=True)``."""
    if distribution["kind"] == "categorical":
        return f"suggest_categorical({distribution['choices']!r})"
    step = distribution.get("step")
    shown = step is not None and (distribution["kind"] == "float" or step != 1)
    extras = [f"step={step!r}"] if shown else []
    extras += ["log=True"] if distribution.get("log") else []
    return f"suggest_{distribution['kind']}({', '.join([repr(distribution['low']), repr(distribution['high']), *extras])})"


def declared_form(kind: str, low: Any, high: Any, step: Any,
                  points: Sequence[Any] | None) -> list[dict[str, Any]]:
    """The distributions a ``suggest_*`` call may give for a declared parameter of
    ``kind`` (diel's space kinds): ``uniform`` and ``loguniform`` are floats,
    ``int`` an int, ``values`` and ``choice`` categoricals; a ``range`` is a float or an
    int with its step; a ``logrange``'s points are a float on a log scale."""
    if kind in ("values", "choice"):
        return [categorical_distribution(list(points or ()))]
    if kind == "int":
        return [int_distribution(int(low), int(high))]
    if kind == "range":
        forms = [float_distribution(low, high, step)]
        if all(isinstance(v, int) for v in (low, high, step)):
            forms.append(int_distribution(low, high, step))
        return forms
    return [float_distribution(low, high, log=kind in ("loguniform", "logrange"))]


def disagreement(name: str, declared: Sequence[Mapping[str, Any]], declared_text: str,
                 asked: Mapping[str, Any]) -> str | None:
    """Why the call ``asked`` (a distribution) disagrees with ``name``'s declaration
    (``declared``: its :func:`declared_form`, shown as ``declared_text``), or None."""
    if any(_same(form, asked) for form in declared):
        return None
    return (f"trial.{describe(asked).replace('(', f'({name!r}, ', 1)} disagrees with the "
            f"declared space: {name}: {declared_text}; make the call and the space: entry "
            "agree (name, kind, bounds, choices), or remove the entry to let the objective "
            "define the parameter")


def _same(one: Mapping[str, Any], other: Mapping[str, Any]) -> bool:
    if one["kind"] != other["kind"]:
        return False
    if one["kind"] == "categorical":
        return sorted(map(_key, one["choices"])) == sorted(map(_key, other["choices"]))
    return all(_close(one.get(key), other.get(key)) for key in ("low", "high", "step")) and \
        bool(one.get("log")) == bool(other.get("log"))


def _close(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=1e-9)


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True)
