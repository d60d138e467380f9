"""Search spaces: the parameters a search varies, read from the YAML ``space:`` mapping.

Each key of the mapping is one parameter (architecture parameters such as ``layers`` or
``activation`` are parameters like any other); its value is a mapping with exactly one
*kind* key:

=============================================  ===============================================
grid kinds (a list of points)                  distributions (not for ``grid``)
=============================================  ===============================================
``{values: [a, b, ...]}``                      ``{uniform: [lo, hi]}`` (float)
``{range: [lo, hi], step: s}`` (inclusive)     ``{loguniform: [lo, hi]}`` (float, lo > 0)
``{logrange: [lo, hi], num: n}``               ``{int: [lo, hi]}`` (inclusive)
``{logrange: [lo, hi], per_decade: k}``        ``{choice: [a, b, ...]}``
=============================================  ===============================================

Conditional parameters: a parameter may add ``when: {parent: value}`` (or ``{parent:
[value, ...]}``, membership; several parents must all hold) naming parameters declared
before it whose kind is ``values`` or ``choice``. It is *active* in a trial only when
every parent is active and has one of the listed values; an inactive parameter is absent
from the trial's ``params``. Conditions nest (a parent may have its own ``when``); a grid
enumerates only the valid combinations and a random draw skips inactive parameters.

Which kinds a strategy can search is the strategy's (``Sampler.kinds``, see
:mod:`diel.search.samplers`). A random search draws grid kinds uniformly from their
points. Grid points are enumerated in a fixed order (parameters in YAML order, the last
one varying fastest) and each point is identified by :func:`param_key`, its canonical
JSON, so a resumed search can tell which points are done. Random draws are a pure function of ``(seed, trial number)``, so a
study is reproducible and a resumed one continues the same sequence.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from diel.checks import is_number, is_whole, mapping, no_unknown_keys, whole_number
from diel.errors import ConfigError
from diel.search.distributions import declared_form

__all__ = ["Param", "SearchSpace", "parse_space", "param_key", "GRID_KINDS", "RANDOM_KINDS",
           "KINDS", "MAX_POINTS"]

GRID_KINDS = ("values", "range", "logrange")
RANDOM_KINDS = ("uniform", "loguniform", "int", "choice")
KINDS = GRID_KINDS + RANDOM_KINDS
MODIFIERS = {"range": ("step",), "logrange": ("num", "per_decade")}
CONDITION = "when"   # the key that makes a parameter conditional
PARENT_KINDS = ("values", "choice")   # the kinds a condition may name
MAX_POINTS = 1_000_000
SIGNIFICANT = 12  # grid floats are rounded to this many digits: 0.1 + 2 * 0.1 -> 0.3


def param_key(params: Mapping[str, Any]) -> str:
    """The stable identity of a parameter set: its canonical JSON (sorted keys)."""
    return json.dumps(params, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _clean(x: float) -> float:
    """``x`` rounded to :data:`SIGNIFICANT` digits, so float steps give the values a
    person would write (0.3, not 0.30000000000000004)."""
    return float(f"{x:.{SIGNIFICANT}g}")


@dataclass(frozen=True)
class Param:
    """One parameter: its kind and the numbers or values that kind needs.

    ``points`` holds the grid points of grid kinds (``None`` for random kinds); ``step``
    a ``range``'s step; ``when`` its conditions: ``(parent, keys of the parent's values
    that make it active)`` pairs, all of which must hold (empty: always active).
    """

    name: str
    kind: str
    low: float | None = None
    high: float | None = None
    points: tuple[Any, ...] | None = None
    step: float | None = None
    when: tuple[tuple[str, frozenset[str]], ...] = ()

    def active(self, params: Mapping[str, Any]) -> bool:
        """True when this parameter belongs in a trial whose parameters so far are
        ``params`` (its parents are declared before it, so they are already there)."""
        return all(parent in params and param_key({"v": params[parent]}) in keys
                   for parent, keys in self.when)

    def sample(self, rng: np.random.Generator) -> Any:
        """One random value for this parameter, drawn with ``rng``."""
        if self.points is not None:
            return self.points[int(rng.integers(len(self.points)))]
        if self.kind == "uniform":
            return float(rng.uniform(self.low, self.high))
        if self.kind == "loguniform":
            return float(math.exp(rng.uniform(math.log(self.low), math.log(self.high))))
        return int(rng.integers(int(self.low), int(self.high), endpoint=True))  # kind "int"


class SearchSpace:
    """The parameters of a search, in YAML order; enumerates a grid or samples at random."""

    def __init__(self, params: Sequence[Param]) -> None:
        self.params = tuple(params)

    @property
    def names(self) -> list[str]:
        """The parameter names in YAML order."""
        return [p.name for p in self.params]

    def declarations(self) -> dict[str, dict[str, Any]]:
        """What a worker checks ``trial.suggest_*`` calls against, by parameter:
        ``forms``, the distributions a call may give
        (:func:`~diel.search.distributions.declared_form`), ``text``, the declaration as
        a message shows it, and ``when``, its conditions as text (None: unconditional)."""
        declared = {}
        for p in self.params:
            shown = list(p.points) if p.kind in ("values", "choice") else [p.low, p.high]
            text = f"{{{p.kind}: {shown}{f', step: {p.step}' if p.step is not None else ''}}}"
            when = {parent: sorted(json.loads(key)["v"] for key in keys)
                    for parent, keys in p.when} if p.when else None
            declared[p.name] = {"forms": declared_form(p.kind, p.low, p.high, p.step, p.points),
                                "text": text, "when": None if when is None else str(when)}
        return declared

    @property
    def conditional(self) -> bool:
        """True when some parameter has a ``when`` condition."""
        return any(p.when for p in self.params)

    def grid_size(self) -> int:
        """How many points the full grid has (needs every parameter to be a grid kind);
        with conditions, the valid combinations only, counted without listing them: the
        count is carried per assignment of the parameters that conditions name."""
        if not self.conditional:
            return math.prod(len(p.points or ()) for p in self.params)
        parents = {parent for p in self.params for parent, _ in p.when}
        counts: dict[str, tuple[dict[str, Any], int]] = {param_key({}): ({}, 1)}
        for param in self.params:
            grown: dict[str, tuple[dict[str, Any], int]] = {}
            for assigned, count in counts.values():
                if not param.active(assigned):
                    _add_count(grown, assigned, count)
                elif param.name in parents:
                    for point in param.points or ():
                        _add_count(grown, {**assigned, param.name: point}, count)
                else:
                    _add_count(grown, assigned, count * len(param.points or ()))
            counts = grown
        return sum(count for _, count in counts.values())

    def grid(self) -> list[dict[str, Any]]:
        """Every grid point, in the deterministic order (last parameter fastest); with
        conditions, only the valid combinations, each without its inactive parameters."""
        if not self.conditional:
            axes = [p.points or () for p in self.params]
            return [dict(zip(self.names, combo)) for combo in itertools.product(*axes)]
        points: list[dict[str, Any]] = [{}]
        for param in self.params:
            points = [{**point, param.name: value} if param.active(point) else point
                      for point in points
                      for value in (param.points or () if param.active(point) else (None,))]
        return points

    def sample(self, seed: int, number: int) -> dict[str, Any]:
        """The parameters of random trial ``number`` for ``seed``; the same every time.
        Inactive parameters are left out (and draw nothing)."""
        rng = np.random.default_rng([seed, number])
        params: dict[str, Any] = {}
        for param in self.params:
            if param.active(params):
                params[param.name] = param.sample(rng)
        return params


def _add_count(counts: dict[str, tuple[dict[str, Any], int]], assigned: dict[str, Any],
               count: int) -> None:
    """Add ``count`` combinations under the parent assignment ``assigned``."""
    key = param_key(assigned)
    counts[key] = (assigned, counts.get(key, (assigned, 0))[1] + count)


def parse_space(spec: Any, path: str, kinds: Sequence[str] = KINDS,
                strategy: str = "") -> SearchSpace:
    """Read a ``space:`` mapping into a :class:`SearchSpace`.

    ``path`` is the key path of ``spec`` in the workflow file, used in every
    :class:`ConfigError`. Only the parameter ``kinds`` that the search's ``strategy``
    (its name, for the message) can search are accepted.
    """
    if not isinstance(spec, Mapping) or not spec:
        raise ConfigError(path, "expected a mapping of parameter names to specs, e.g. "
                                "{lr: {values: [0.1, 0.01]}}")
    params: list[Param] = []
    for name, entry in spec.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ConfigError(f"{path}.{name}", "parameter names must be identifiers "
                                                "(letters, digits, _), as they fill {name} placeholders")
        param = _parse_param(name, entry, f"{path}.{name}", kinds, strategy)
        when = _parse_when(entry.get(CONDITION), f"{path}.{name}.{CONDITION}",
                           {p.name: p for p in params}) if CONDITION in entry else ()
        params.append(dataclasses.replace(param, when=when))
    return SearchSpace(params)


def _parse_when(spec: Any, path: str, before: Mapping[str, Param]) -> tuple[
        tuple[str, frozenset[str]], ...]:
    """``when: {parent: value | [value, ...]}``: each parent a ``values`` or ``choice``
    parameter declared before, each value one of its points."""
    mapping(spec, path, "a mapping of parent parameters to a value or a list of values, "
                        "e.g. {classifier: SVC} or {classifier: [SVC, LinearSVC]}")
    if not spec:
        raise ConfigError(path, "expected at least one parent parameter, e.g. {classifier: SVC}")
    conditions = []
    for parent, wanted in spec.items():
        where = f"{path}.{parent}"
        declared = before.get(parent) if isinstance(parent, str) else None
        if declared is None:
            raise ConfigError(where, f"names no parameter declared before this one; a "
                                     f"condition's parent comes first in the space (declared "
                                     f"so far: {', '.join(before) or 'none'})")
        if declared.kind not in PARENT_KINDS:
            raise ConfigError(where, f"{parent} is a {declared.kind} parameter; a condition "
                                     f"names a {' or '.join(PARENT_KINDS)} parameter")
        values = wanted if isinstance(wanted, list) else [wanted]
        keys = {param_key({"v": point}) for point in declared.points or ()}
        for value in values:
            if param_key({"v": value}) not in keys:
                raise ConfigError(where, f"{value!r} is not one of {parent}'s values "
                                         f"({', '.join(map(repr, declared.points or ()))})")
        conditions.append((parent, frozenset(param_key({"v": v}) for v in values)))
    return tuple(conditions)


def _parse_param(name: str, entry: Any, path: str, accepted: Sequence[str],
                 strategy: str) -> Param:
    """One parameter spec: exactly one kind key plus that kind's modifiers (and
    ``when``, read by the caller)."""
    mapping(entry, path, f"a mapping with one of {', '.join(KINDS)}, e.g. {{values: [1, 2]}}")
    kinds = [k for k in entry if k in KINDS]
    if len(kinds) != 1:
        raise ConfigError(path, f"expected exactly one of {', '.join(KINDS)}; got "
                                f"{', '.join(map(str, entry)) or 'nothing'}")
    kind = kinds[0]
    allowed = sorted({kind, CONDITION, *MODIFIERS.get(kind, ())})
    no_unknown_keys(entry, allowed, path, lambda key: f"unknown key for a {kind} parameter; "
                                                      f"allowed: {', '.join(allowed)}")
    if kind not in accepted:
        raise ConfigError(f"{path}.{kind}", f"strategy {strategy} cannot search a {kind} "
                                            f"parameter; it takes {', '.join(accepted)}")
    if kind in ("values", "choice"):
        return Param(name, kind, points=_parse_values(entry[kind], f"{path}.{kind}"))
    low, high = _parse_bounds(entry[kind], f"{path}.{kind}", kind)
    if kind == "range":
        return Param(name, kind, low, high, _range_points(low, high, entry, path),
                     step=entry["step"])
    if kind == "logrange":
        return Param(name, kind, low, high, _logrange_points(low, high, entry, path))
    return Param(name, kind, low, high)


def _parse_values(values: Any, path: str) -> tuple[Any, ...]:
    """A non-empty list of distinct JSON scalars."""
    if not isinstance(values, list) or not values:
        raise ConfigError(path, f"expected a non-empty list of values; got {values!r}")
    seen = set()
    for i, value in enumerate(values):
        if not (value is None or isinstance(value, (bool, int, float, str))) or (
                isinstance(value, float) and not math.isfinite(value)):
            raise ConfigError(f"{path}[{i}]", "expected a number, string, boolean or null; "
                                              f"got {value!r}")
        key = param_key({"v": value})
        if key in seen:
            raise ConfigError(f"{path}[{i}]", f"duplicate value {value!r}")
        seen.add(key)
    return tuple(values)


def _is_finite_number(value: Any) -> bool:
    """True for finite int/float that are not booleans."""
    return is_number(value) and math.isfinite(value)


def _parse_bounds(bounds: Any, path: str, kind: str) -> tuple[float, float]:
    """``[lo, hi]`` with lo <= hi (lo < hi for continuous kinds, lo > 0 for log kinds)."""
    if not (isinstance(bounds, list) and len(bounds) == 2 and all(map(_is_finite_number, bounds))):
        raise ConfigError(path, f"expected [low, high], two numbers; got {bounds!r}")
    low, high = bounds
    if kind == "int" and not all(isinstance(b, int) for b in bounds):
        raise ConfigError(path, f"expected two integers; got {bounds!r}")
    if low > high or (low == high and kind in ("uniform", "loguniform")):
        raise ConfigError(path, f"expected low < high; got {bounds!r}")
    if kind in ("logrange", "loguniform") and low <= 0:
        raise ConfigError(path, f"a log scale needs low > 0; got {bounds!r}")
    return low, high


def _check_count(count: int, path: str) -> None:
    if count > MAX_POINTS:
        raise ConfigError(path, f"gives {count} points; at most {MAX_POINTS} are allowed")


def _range_points(low: float, high: float, entry: Mapping, path: str) -> tuple[Any, ...]:
    """``low, low + step, ...`` up to and including ``high`` (within float rounding)."""
    step = entry.get("step")
    if not _is_finite_number(step) or step <= 0:
        raise ConfigError(f"{path}.step", f"a range needs step: a number > 0; got {step!r}")
    count = math.floor((high - low) / step * (1 + 1e-12) + 1e-9) + 1
    _check_count(count, f"{path}.range")
    if all(isinstance(v, int) for v in (low, high, step)):
        return tuple(low + i * step for i in range(count))
    return tuple(_clean(low + i * step) for i in range(count))


def _logrange_points(low: float, high: float, entry: Mapping, path: str) -> tuple[float, ...]:
    """Log-spaced points from ``low`` to ``high``: ``num`` in all (both ends included) or
    ``per_decade`` per factor of ten (starting at ``low``, not past ``high``)."""
    if ("num" in entry) == ("per_decade" in entry):
        raise ConfigError(path, "a logrange needs exactly one of num (points in all) or "
                                "per_decade (points per factor of 10)")
    decades = math.log10(high / low)
    if "num" in entry:
        num = entry["num"]
        if not is_whole(num) or num < 1 or (num == 1 and low != high):
            raise ConfigError(f"{path}.num", f"expected an integer >= 2; got {num!r}")
        _check_count(num, f"{path}.num")
        if num == 1:
            return (float(low),)
        return tuple(_clean(low * 10 ** (decades * i / (num - 1))) for i in range(num))
    per = whole_number(entry["per_decade"], f"{path}.per_decade", 1)
    count = math.floor(decades * per + 1e-9) + 1
    _check_count(count, f"{path}.per_decade")
    return tuple(_clean(low * 10 ** (i / per)) for i in range(count))
