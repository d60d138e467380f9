"""``{name}`` placeholders in a program's arguments: one strict filler for every program
diel runs (executable modules and program trials).

Only plain names are replaced, never attribute or index access or format specs, and the
value is inserted as one literal argument: programs run without a shell, so a value such
as ``"a b; rm -rf /"`` stays a single harmless string. ``{{`` and ``}}`` are literal braces.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

__all__ = ["fill_placeholders", "placeholder_names"]

_TOKEN = re.compile(r"\{\{|\}\}|\{([A-Za-z_]\w*)\}|[{}]")


def placeholder_names(text: str) -> list[str]:
    """The names ``text`` uses; ValueError on a stray brace or a non-name placeholder."""
    names = []
    for match in _TOKEN.finditer(text):
        if match.group(0) in ("{{", "}}"):
            continue
        if match.group(1) is None:
            raise ValueError(f"stray brace or unsupported placeholder in {text!r}; placeholders "
                             "are plain names such as {lr}, and {{ or }} write a literal brace")
        names.append(match.group(1))
    return names


def fill_placeholders(argv: Sequence[Any], values: Mapping[str, Any]) -> list[str]:
    """``argv`` with every ``{name}`` replaced by ``str(values[name])``.

    ValueError names the argument and the known names when a placeholder is unknown.
    """
    def fill(arg: str) -> str:
        def replace(match: re.Match) -> str:
            token, name = match.group(0), match.group(1)
            if token in ("{{", "}}"):
                return token[0]
            if name is None:
                placeholder_names(arg)   # raises with the message
            if name not in values:
                raise ValueError(f"unknown placeholder {{{name}}} in argument {arg!r}; "
                                 f"known: {', '.join(sorted(values))}")
            return str(values[name])
        return _TOKEN.sub(replace, arg)
    return [fill(str(arg)) for arg in argv]
