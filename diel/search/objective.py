"""Objective expressions and stop thresholds, parsed safely.

An objective combines a trial's metrics, e.g. ``accuracy - 0.001 * time``, and has a
direction (``maximize`` or ``minimize``). A search has one objective (the settings
``objective`` and ``direction``) or several (``objectives: {accuracy: maximize, time:
minimize}``, expressions as keys): :func:`parse_objectives` reads either form into
:class:`Objectives`. A threshold such as ``accuracy >= 0.97`` is a stop rule. Expressions
are parsed with :mod:`ast` and only a small whitelist is accepted: metric names, numbers,
``+ - * / **``, unary minus, parentheses and the functions ``min``, ``max``, ``abs``,
``log``, ``exp``, ``sqrt``. Nothing is ever passed to ``eval``; a tiny tree walker
computes the value in floats (so ``**`` cannot build huge integers).
"""

from __future__ import annotations

import ast
import math
import operator
from typing import Any, Callable, Iterable, Iterator, Mapping

from diel.checks import did_you_mean, is_number
from diel.errors import ConfigError

__all__ = ["Expression", "Objective", "Objectives", "Threshold", "parse_objectives",
           "DIRECTIONS", "BASE_METRICS"]

DIRECTIONS = ("maximize", "minimize")
BASE_METRICS = ("accuracy", "loss", "time", "epoch")

_BINARY: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.Pow: operator.pow,
}
_FUNCTIONS: dict[str, Callable[..., float]] = {
    "min": min, "max": max, "abs": abs, "log": math.log, "exp": math.exp, "sqrt": math.sqrt,
}
_COMPARE: dict[type, tuple[str, Callable[[float, float], bool]]] = {
    ast.Lt: ("<", operator.lt), ast.LtE: ("<=", operator.le),
    ast.Gt: (">", operator.gt), ast.GtE: (">=", operator.ge),
}


class Expression:
    """A parsed arithmetic expression over metric names.

    ``names`` are the names it may use; an unknown name or any construct outside the
    whitelist raises :class:`ConfigError` at ``path``.
    """

    def __init__(self, text: str, path: str, names: Iterable[str]) -> None:
        if not (isinstance(text, str) or is_number(text)):
            raise ConfigError(path, f"expected an expression such as 'accuracy - 0.001 * time'; "
                                    f"got {text!r}")
        self.text = str(text)
        self.path = path
        self._known = frozenset(names)
        self._tree = _parse(self.text, path).body
        self.names: frozenset[str] = frozenset(self._check(self._tree))

    def _check(self, node: ast.AST) -> list[str]:
        """Validate ``node`` against the whitelist; return the metric names it uses."""
        if isinstance(node, ast.Constant):
            if not is_number(node.value):
                raise self._error(f"only numbers are allowed as constants, not {node.value!r}")
            return []
        if isinstance(node, ast.Name):
            if node.id not in self._known:
                raise self._error(f"unknown name {node.id!r}{did_you_mean(node.id, self._known)}"
                                  f"; known: {', '.join(sorted(self._known))}")
            return [node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return self._check(node.left) + self._check(node.right)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            return self._check(node.operand)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id not in _FUNCTIONS or node.keywords or not node.args:
                raise self._error(f"unknown function {node.func.id!r}; allowed: "
                                  f"{', '.join(sorted(_FUNCTIONS))}")
            return [name for arg in node.args for name in self._check(arg)]
        raise self._error(f"{type(node).__name__} is not allowed; use metric names, numbers, "
                          "+ - * / **, parentheses and min/max/abs/log/exp/sqrt")

    def _error(self, message: str) -> ConfigError:
        return ConfigError(self.path, f"in {self.text!r}: {message}")

    @property
    def canonical(self) -> str:
        """The expression as Python prints it back, so ``a-b`` and ``a - b`` are one."""
        return ast.unparse(self._tree)

    def evaluate(self, values: Mapping[str, float]) -> float | None:
        """The value for ``values`` (metric name -> number).

        ``None`` when a name it uses is missing or not a number; ``nan`` when the
        arithmetic fails (division by zero, log of a negative, overflow).
        """
        try:
            return self._eval(self._tree, values)
        except _Missing:
            return None
        except (ArithmeticError, ValueError):
            return math.nan

    def _eval(self, node: ast.AST, values: Mapping[str, float]) -> float:
        if isinstance(node, ast.Constant):
            return float(node.value)
        if isinstance(node, ast.Name):
            value = values.get(node.id)
            if not is_number(value):
                raise _Missing(node.id)
            return float(value)
        if isinstance(node, ast.BinOp):
            return _BINARY[type(node.op)](self._eval(node.left, values),
                                          self._eval(node.right, values))
        if isinstance(node, ast.UnaryOp):
            value = self._eval(node.operand, values)
            return -value if isinstance(node.op, ast.USub) else value
        # _check admitted nothing else: a call of a whitelisted function
        args = [self._eval(a, values) for a in node.args]  # type: ignore[attr-defined]
        return float(_FUNCTIONS[node.func.id](*args))  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        return f"Expression({self.text!r})"


class _Missing(Exception):
    """A name the expression needs has no numeric value."""


def _parse(text: str, path: str) -> ast.Expression:
    try:
        return ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise ConfigError(path, f"cannot parse {text!r}: {e.msg}") from e


class Objective:
    """One thing a search optimizes: an :class:`Expression` and a direction. Errors are
    reported at ``path.objective`` and ``path.direction``, or, for one entry of the
    ``objectives`` mapping, at its key path ``at``."""

    def __init__(self, text: str, direction: str, path: str, names: Iterable[str],
                 at: str | None = None) -> None:
        if direction not in DIRECTIONS:
            where = at or (f"{path}.direction" if path else "direction")
            raise ConfigError(where, f"expected maximize or minimize; got {direction!r}"
                                     f"{did_you_mean(direction, DIRECTIONS)}")
        self.expression = Expression(text, at or (f"{path}.objective" if path else "objective"),
                                     names)
        self.direction = direction

    @property
    def text(self) -> str:
        return self.expression.text

    def value(self, metrics: Mapping[str, float]) -> float | None:
        """The objective for ``metrics``; ``None`` when a metric is missing."""
        return self.expression.evaluate(metrics)

    def score(self, value: float) -> float:
        """``value`` turned so that larger is always better."""
        return value if self.direction == "maximize" else -value

    def better(self, a: float, b: float | None) -> bool:
        """True when objective ``a`` beats ``b`` (anything beats ``None``)."""
        return b is None or self.score(a) > self.score(b)


class Objectives:
    """Everything a search optimizes: one :class:`Objective` or several, in the order of
    the settings. The first is the study's ranking objective (``objective`` in the
    results database; the pruners' default metric)."""

    def __init__(self, objectives: Iterable[Objective]) -> None:
        self.items: tuple[Objective, ...] = tuple(objectives)
        if not self.items:
            raise ValueError("a search needs at least one objective")

    @property
    def first(self) -> Objective:
        return self.items[0]

    @property
    def several(self) -> bool:
        """True for a search of several objectives (a Pareto front, not one best)."""
        return len(self.items) > 1

    @property
    def specs(self) -> tuple[tuple[str, str], ...]:
        """``(expression text, direction)`` of each objective, as the study stores them."""
        return tuple((o.text, o.direction) for o in self.items)

    @property
    def directions(self) -> list[str]:
        return [o.direction for o in self.items]

    def values(self, metrics: Mapping[str, float]) -> tuple[float | None, ...]:
        """Each objective's value for ``metrics`` (``None`` where a metric is missing,
        ``nan`` where the arithmetic fails)."""
        return tuple(o.value(metrics) for o in self.items)

    def __iter__(self) -> Iterator[Objective]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


def parse_objectives(settings: Mapping[str, Any], path: str, names: Iterable[str]) -> Objectives:
    """The objectives of the search settings ``settings`` (at key path ``path``): the
    ``objectives`` mapping of expressions to directions, or the single ``objective``
    (default ``accuracy``) and ``direction`` (default ``maximize``), never both. Raises
    :class:`ConfigError` at the key path of the mistake."""
    names = list(names)
    if "objectives" not in settings:
        if isinstance(settings.get("objective"), Mapping):
            raise ConfigError(f"{path}.objective" if path else "objective",
                              "expected one expression such as 'accuracy - 0.001 * time'; "
                              "several objectives go under objectives (did you mean "
                              "objectives: {accuracy: maximize, time: minimize}?)")
        return Objectives([Objective(settings.get("objective", "accuracy"),
                                     settings.get("direction", "maximize"), path, names)])
    where = f"{path}.objectives" if path else "objectives"
    single = [key for key in ("objective", "direction") if key in settings]
    if single:
        raise ConfigError(where, f"give either objectives (each expression with its "
                                 f"direction) or objective and direction, not both; this "
                                 f"search also has {' and '.join(single)}")
    given = settings["objectives"]
    if not isinstance(given, Mapping) or not given:
        raise ConfigError(where, "expected a mapping of expressions to directions, e.g. "
                                 f"{{accuracy: maximize, time: minimize}}; got {given!r}")
    parsed: list[Objective] = []
    seen: dict[str, str] = {}
    for text, direction in given.items():
        at = f"{where}.{text}" if isinstance(text, str) and text.isidentifier() \
            else f"{where}[{text!r}]"
        objective = Objective(text, direction, path, names, at=at)
        canonical = objective.expression.canonical
        if canonical in seen:
            raise ConfigError(at, f"the same objective as {seen[canonical]!r}; each "
                                  "objective once")
        seen[canonical] = objective.text
        parsed.append(objective)
    return Objectives(parsed)


class Threshold:
    """A stop rule ``<expression> <op> <expression>`` with op one of ``< <= > >=``,
    e.g. ``accuracy >= 0.97`` or ``objective > 0.9``."""

    def __init__(self, text: str, path: str, names: Iterable[str]) -> None:
        if not isinstance(text, str):
            raise ConfigError(path, f"expected a comparison such as 'accuracy >= 0.97'; got {text!r}")
        self.text = text
        tree = _parse(text, path).body
        if not (isinstance(tree, ast.Compare) and len(tree.ops) == 1
                and type(tree.ops[0]) in _COMPARE):
            raise ConfigError(path, f"expected one comparison with < <= > or >=, such as "
                                    f"'accuracy >= 0.97'; got {text!r}")
        names = list(names)
        self.left = Expression(ast.unparse(tree.left), path, names)
        self.right = Expression(ast.unparse(tree.comparators[0]), path, names)
        self.op, self._compare = _COMPARE[type(tree.ops[0])]

    def met(self, metrics: Mapping[str, float]) -> bool:
        """True when both sides evaluate to numbers and the comparison holds."""
        left, right = self.left.evaluate(metrics), self.right.evaluate(metrics)
        if left is None or right is None or math.isnan(left) or math.isnan(right):
            return False
        return self._compare(left, right)

    def __repr__(self) -> str:
        return f"Threshold({self.text!r})"
