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

diel's own names resolve from :data:`BUILTINS`, a table of what pyproject.toml registers
(a test keeps the two the same), without reading the installed packages' entry points:
``importlib.metadata`` and the scan of every installed distribution cost each rank tens of
milliseconds at start-up, spent only to find ``search`` or ``random``. A builtin name is
diel's: a package that registers it too is not consulted. Any other name is looked up in
the entry points.

:func:`load_plugin` finds the one a workflow names and loads it; every problem is a
:class:`~diel.errors.ConfigError` at that setting's key path: no such name (in the
caller's words, with the installed names), a name registered twice, a plug-in that fails
to import, or one that is not the kind of object the extension point takes.
"""

from __future__ import annotations

import importlib
import traceback
from typing import Any, Callable

from diel.errors import ConfigError
from diel.limits import LOG_TEXT_CHARS, clip

__all__ = ["BUILTINS", "plugin_names", "load_plugin", "exception_line"]

#: diel's own plug-ins, by entry-point group and name: the targets pyproject.toml
#: registers ("package.module:attribute").
BUILTINS: dict[str, dict[str, str]] = {
    "diel.modules": {"tuplespace": "tuplespace.module:main",
                     "search": "diel.search.master:main",
                     "trainer": "diel.worker.trainer_module:main",
                     "worker": "diel.worker.module:main"},
    "diel.samplers": {"grid": "diel.search.samplers.grid:GridSampler",
                      "random": "diel.search.samplers.random:RandomSampler",
                      "tpe": "diel.search.samplers.optuna_based:TPESampler",
                      "gp": "diel.search.samplers.optuna_based:GPSampler",
                      "cmaes": "diel.search.samplers.optuna_based:CmaEsSampler",
                      "qmc": "diel.search.samplers.optuna_based:QMCSampler",
                      "nsga2": "diel.search.samplers.optuna_based:NSGAIISampler",
                      "pbt": "diel.search.samplers.pbt:PBTSampler"},
    "diel.schedulers": {"median": "diel.search.schedulers.median:MedianPruner",
                        "halving": "diel.search.schedulers.halving:HalvingPruner",
                        "hyperband": "diel.search.schedulers.hyperband:HyperbandPruner"},
    "diel.storages": {"sql": "diel.results._store:ResultsStore",
                      "memory": "diel.results._memory:MemoryStorage"},
}


def plugin_names(group: str) -> list[str]:
    """The names installed in the entry-point group ``group``, sorted."""
    import importlib.metadata   # only here and for a name that is not builtin (module docstring)
    return sorted({ep.name for ep in importlib.metadata.entry_points(group=group)})


def load_plugin(group: str, name: str, path: str, what: str,
                unknown: Callable[[list[str]], str], base: type | None = None,
                base_name: str = "") -> Any:
    """The object registered as ``name`` in the entry-point group ``group``.

    ``what`` names the kind of plug-in in messages (``strategy``, ``scheduler``). When no
    plug-in has that name, the message is ``unknown(installed names)``. With ``base``,
    the object must be a subclass of it (``base_name``: its public name, for the
    message). A name that two installed packages register (under different targets) is
    refused rather than one of them chosen silently; a builtin name (:data:`BUILTINS`)
    is diel's, loaded without reading entry points.
    """
    builtin = BUILTINS.get(group, {}).get(name)
    if builtin is not None:
        return _load(builtin, lambda: _resolve(builtin), what, name, path, base, base_name)
    import importlib.metadata   # only for a name that is not builtin (module docstring)
    found = {ep.value: ep for ep in importlib.metadata.entry_points(group=group)
             if ep.name == name}
    if not found:
        raise ConfigError(path, unknown(plugin_names(group)))
    if len(found) > 1:
        raise ConfigError(path, f"{what} {name!r} is registered more than once in {group}: "
                                f"{', '.join(sorted(found))}; uninstall one")
    entry = next(iter(found.values()))
    return _load(entry.value, entry.load, what, name, path, base, base_name)


def _resolve(target: str) -> Any:
    """The object a builtin's ``package.module:attribute`` names (what
    ``pkgutil.resolve_name`` does for that form, without importing pkgutil and compiling
    its pattern for every name form: some 0.7 ms of every rank's start)."""
    module, _, attribute = target.partition(":")
    found = importlib.import_module(module)
    for part in attribute.split("."):
        found = getattr(found, part)
    return found


def _load(target: str, load: Callable[[], Any], what: str, name: str, path: str,
          base: type | None, base_name: str) -> Any:
    """The plug-in ``load()`` gives (``target``: where it is, for messages); a
    :class:`ConfigError` at ``path`` when it fails to load or is not a subclass of
    ``base``."""
    try:
        loaded = load()
    except Exception as exc:  # a broken plug-in is a config problem, not a crash
        raise ConfigError(path, f"{what} {name} ({target}) failed to load: "
                                f"{exception_line(exc)}") from None
    if base is not None and not (isinstance(loaded, type) and issubclass(loaded, base)):
        raise ConfigError(path, f"{what} {name} ({target}) is not a subclass of "
                                f"{base_name or base.__qualname__}")
    return loaded


def exception_line(exc: BaseException) -> str:
    """``Type: message`` of ``exc`` (its last line, as a traceback ends), clipped to
    :data:`~diel.limits.LOG_TEXT_CHARS`."""
    lines = traceback.format_exception_only(type(exc), exc)
    return clip(lines[-1].strip() if lines else type(exc).__name__, LOG_TEXT_CHARS)
