"""A stored study's objectives, as readers see them, and naming some of them.

A study of several objectives stores them in ``studies.objectives`` (schema 4); a study
of one, or any study of an older database, has just ``objective`` and ``direction``.
:func:`study_objectives` gives both as one tuple of ``(expression, direction)`` pairs;
:func:`choose_objectives` picks those a user named (``diel results --pareto --objective ...``),
comparing expressions by their syntax, not their spacing.
"""

from __future__ import annotations

import ast
from typing import Any, Sequence

from diel.checks import did_you_mean
from diel.results._storage import ObjectiveSpec

__all__ = ["study_objectives", "choose_objectives", "describe_objectives"]


def study_objectives(objective: str, direction: str,
                     objectives: Any) -> tuple[ObjectiveSpec, ...]:
    """The objectives of a study row: its ``objectives`` list when it holds several,
    else its one ``objective`` and ``direction``."""
    if isinstance(objectives, list) and objectives:
        return tuple((str(o["expression"]), str(o["direction"])) for o in objectives)
    return ((objective, direction),)


def describe_objectives(specs: Sequence[ObjectiveSpec]) -> str:
    """``'accuracy' (maximize), 'time' (minimize)``, for messages."""
    return ", ".join(f"{text!r} ({direction})" for text, direction in specs)


def _canonical(text: str) -> str:
    """``text`` as Python would print the expression back, so ``a-b`` names ``a - b``."""
    try:
        return ast.unparse(ast.parse(text.strip(), mode="eval"))
    except SyntaxError:
        return text.strip()


def choose_objectives(study: str, specs: Sequence[ObjectiveSpec], names: Sequence[str]) -> list[int]:
    """The positions in ``specs`` of the objectives ``names`` (every one when ``names``
    is empty); :class:`ValueError` naming one the study does not have, with the closest
    and every objective it has, or one named twice."""
    if not names:
        return list(range(len(specs)))
    canonical = [_canonical(text) for text, _ in specs]
    chosen: list[int] = []
    for name in names:
        key = _canonical(name)
        if key not in canonical:
            raise ValueError(f"study {study!r} has no objective {name!r}"
                             f"{did_you_mean(key, canonical)}; its objectives: "
                             f"{describe_objectives(specs)}")
        position = canonical.index(key)
        if position in chosen:
            raise ValueError(f"objective {name!r} is named twice")
        chosen.append(position)
    return chosen
