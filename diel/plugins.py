"""Plug-ins: what installed packages add to diel through entry points.

Each extension point is an entry-point group: ``diel.modules`` (builtin modules, named by
``function:``), ``diel.samplers`` (search strategies, ``strategy:``),
``diel.schedulers`` (schedulers, the search's ``pruner:``) and ``diel.storages`` (results
storages, by the scheme of the search's ``database:`` URL). diel registers its own there
too (pyproject.toml), so its builtins and a third party's are found the same way, and
the code that uses them has no branch per implementation (docs/extending.md).

This module sits beside :mod:`diel.errors` and :mod:`diel.checks` at the bottom of
diel's layers (it imports only :mod:`diel.errors` and :mod:`diel.limits`), so that every
part with an extension point, the executive and the results package alike, can use it.

:func:`load_plugin` finds the one a workflow names and loads it; every problem is a
:class:`~diel.errors.ConfigError` at that setting's key path: no such name (in the
caller's words, with the installed names), a name registered twice, a plug-in that fails
to import, or one that is not the kind of object the extension point takes.
"""

from __future__ import annotations

import importlib.metadata
import traceback
from typing import Any, Callable

from diel.errors import ConfigError
from diel.limits import LOG_TEXT_CHARS, clip

__all__ = ["plugin_names", "load_plugin", "exception_line"]


def plugin_names(group: str) -> list[str]:
    """The names installed in the entry-point group ``group``, sorted."""
    return sorted({ep.name for ep in importlib.metadata.entry_points(group=group)})


def load_plugin(group: str, name: str, path: str, what: str,
                unknown: Callable[[list[str]], str], base: type | None = None,
                base_name: str = "") -> Any:
    """The object registered as ``name`` in the entry-point group ``group``.

    ``what`` names the kind of plug-in in messages (``strategy``, ``scheduler``). When no
    plug-in has that name, the message is ``unknown(installed names)``. With ``base``,
    the object must be a subclass of it (``base_name``: its public name, for the
    message). A name that two installed packages register (under different targets) is
    refused rather than one of them chosen silently.
    """
    found = {ep.value: ep for ep in importlib.metadata.entry_points(group=group)
             if ep.name == name}
    if not found:
        raise ConfigError(path, unknown(plugin_names(group)))
    if len(found) > 1:
        raise ConfigError(path, f"{what} {name!r} is registered more than once in {group}: "
                                f"{', '.join(sorted(found))}; uninstall one")
    entry = next(iter(found.values()))
    try:
        loaded = entry.load()
    except Exception as exc:  # a broken plug-in is a config problem, not a crash
        raise ConfigError(path, f"{what} {name} ({entry.value}) failed to load: "
                                f"{exception_line(exc)}") from None
    if base is not None and not (isinstance(loaded, type) and issubclass(loaded, base)):
        raise ConfigError(path, f"{what} {name} ({entry.value}) is not a subclass of "
                                f"{base_name or base.__qualname__}")
    return loaded


def exception_line(exc: BaseException) -> str:
    """``Type: message`` of ``exc`` (its last line, as a traceback ends), clipped to
    :data:`~diel.limits.LOG_TEXT_CHARS`."""
    lines = traceback.format_exception_only(type(exc), exc)
    return clip(lines[-1].strip() if lines else type(exc).__name__, LOG_TEXT_CHARS)
