"""``{name}`` placeholders in a program's arguments: one strict filler for every program
diel runs (executable modules and program trials).

Only plain names are replaced, never attribute or index access or format specs, and the
value is inserted as one literal argument: programs run without a shell, so a value such
as ``"a b; rm -rf /"`` stays a single harmless string. ``{{`` and ``}}`` are literal braces.
:func:`check_placeholders` is validation's check of an argv against the names it will
be given, so that a typo fails ``diel validate`` instead of every run.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Sequence

from diel.checks import closest
from diel.errors import ConfigError

__all__ = ["fill_placeholders", "placeholder_names", "check_placeholders"]

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


def check_placeholders(argv: Sequence[Any], known: Iterable[Any], path: str,
                       known_are: str) -> None:
    """Raise :class:`ConfigError` at ``path[i]`` for the first argument of ``argv`` with a
    stray brace or a placeholder not in ``known`` (the closest known name is suggested);
    ``known_are`` says where the known names come from, for the message."""
    names = sorted({str(name) for name in known})
    for index, arg in enumerate(argv):
        where = f"{path}[{index}]"
        try:
            used = placeholder_names(str(arg))
        except ValueError as exc:
            raise ConfigError(where, str(exc)) from None
        for name in used:
            if name not in names:
                hint = closest(name, names)
                suggestion = f"did you mean {{{hint}}}? " if hint else ""
                raise ConfigError(where, f"unknown placeholder {{{name}}}; {suggestion}known: "
                                         f"{', '.join(names)} ({known_are})")


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
