"""Finding the user's objective function from ``run: train.py:objective`` or
``run: package.module:objective``, checked before the workflow starts and loaded once
per process (in the isolated child, or in the rank itself).

The check imports nothing of the user's (so their code does not run at validation): it
reads the source with :mod:`ast` and looks for the name among the file's top-level
bindings (a ``def``, ``async def``, ``class``, assignment or import, also under a
top-level ``if`` or ``try``). A misspelt name is refused with the closest one, a file
that does not parse with its line.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator

from diel.checks import closest
from diel.executive.paths import os_reason, shown_path

__all__ = ["check_run_spec", "load_function"]

_BLOCKS = (ast.If, ast.Try, ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While,
           *((ast.TryStar,) if hasattr(ast, "TryStar") else ()))


def _split(spec: str) -> tuple[str, str]:
    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name.isidentifier():
        raise ValueError(f"expected 'file.py:function' or 'package.module:function', got "
                         f"{shown_path(spec)!r}")
    return target, name


def _file_of(target: str, base: Path) -> Path | None:
    """The Python file a ``file.py`` target names (relative to ``base``), else None."""
    if not target.endswith(".py"):
        return None
    path = Path(target)
    return path if path.is_absolute() else base / path


def check_run_spec(spec: Any, base: Path) -> None:
    """Raise ValueError (one line) when ``spec`` cannot name a function: the file or
    module is missing or unreadable, its source does not parse, or it binds no such
    name at its top level. The user's code is read, not run (module docstring); only
    the parent packages of a ``package.module`` are imported, to find the module."""
    if not isinstance(spec, str):
        raise ValueError(f"expected 'file.py:function' or 'package.module:function', got {spec!r}")
    target, name = _split(spec)
    file = _file_of(target, base)
    if file is not None:
        _check_is_file(file)
    else:
        file = _module_source(target)
        if file is None:   # compiled or built in: nothing to read
            return
    _check_binds(file, name, target)


def _check_is_file(file: Path) -> None:
    try:
        if file.is_file():
            return
        problem = "is a folder, not a Python file" if file.is_dir() else "no such file"
    except (OSError, ValueError) as e:   # too long a name, no permission, a NUL
        problem = f"cannot be used: {os_reason(e)}"
    raise ValueError(f"{shown_path(file)}: {problem}")


def _module_source(target: str) -> Path | None:
    """The source file of the module ``target`` (found, not imported), or None when it
    has none (a compiled extension); ValueError when it cannot be found."""
    try:
        found = importlib.util.find_spec(target)
    except Exception as e:   # a parent package failed to import, or a malformed name
        raise ValueError(f"cannot find module {shown_path(target)!r}: {_last_line(e)}") from None
    if found is None:
        raise ValueError(f"cannot find module {shown_path(target)!r} (looked beside the "
                         "workflow and on sys.path)")
    origin = found.origin if found.has_location else None
    return Path(origin) if origin and origin.endswith(".py") else None


def _check_binds(file: Path, name: str, target: str) -> None:
    """``file``'s source binds ``name`` at its top level (``target`` names it as the
    user wrote it)."""
    try:
        source = file.read_bytes()
    except OSError as e:
        raise ValueError(f"cannot read {shown_path(file)}: {e.strerror}") from None
    try:
        tree = ast.parse(source, filename=str(file))
    except SyntaxError as e:
        line = f", line {e.lineno}" if e.lineno else ""
        raise ValueError(f"{shown_path(target)}{line}: {e.msg}; the file cannot be "
                         "imported") from None
    except (ValueError, RecursionError) as e:
        raise ValueError(f"{shown_path(target)} cannot be parsed as Python: {e}") from None
    names = list(dict.fromkeys(_top_level_names(tree.body)))
    if name in names or "*" in names or "__getattr__" in names:   # open-ended modules
        return
    hint = closest(name, names)
    functions = [s.name for s in tree.body
                 if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))]
    suggestion = (f"; did you mean '{hint}'?" if hint else
                  f"; its functions are {', '.join(functions[:10])}" if functions else
                  "; it defines no function")
    raise ValueError(f"{shown_path(target)} has no top-level function '{name}'{suggestion}")


def _top_level_names(body: list[ast.stmt]) -> Iterator[str]:
    """The names statements at a module's top level bind (``*`` for a star import)."""
    for statement in body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield statement.name
        elif isinstance(statement, ast.Assign):
            for target in statement.targets:
                yield from _bound(target)
        elif isinstance(statement, (ast.AnnAssign, ast.AugAssign)):
            yield from _bound(statement.target)
        elif isinstance(statement, (ast.Import, ast.ImportFrom)):
            for alias in statement.names:
                yield alias.asname or alias.name.partition(".")[0]
        elif isinstance(statement, _BLOCKS):
            if isinstance(statement, (ast.For, ast.AsyncFor)):
                yield from _bound(statement.target)
            if isinstance(statement, (ast.With, ast.AsyncWith)):
                for item in statement.items:
                    if item.optional_vars is not None:
                        yield from _bound(item.optional_vars)
            for part in ("body", "orelse", "finalbody"):
                yield from _top_level_names(getattr(statement, part, []))
            for handler in getattr(statement, "handlers", []):
                yield from _top_level_names(handler.body)
        elif isinstance(statement, ast.Match):
            for case in statement.cases:
                yield from _top_level_names(case.body)


def _bound(target: ast.expr) -> Iterator[str]:
    """The names an assignment target binds (``a``, ``a, b = ...``, ``*rest``)."""
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _bound(element)
    elif isinstance(target, ast.Starred):
        yield from _bound(target.value)


def _last_line(error: BaseException) -> str:
    lines = traceback.format_exception_only(type(error), error)
    return lines[-1].strip() if lines else type(error).__name__


def load_function(spec: str, base: Path) -> Callable[..., Any]:
    """Import the function ``spec`` names; ``file.py`` paths are relative to ``base``.

    A file is imported as a module named after it, with its folder on ``sys.path`` so
    that it can import its neighbours. Raises ImportError or AttributeError with the cause.
    """
    target, name = _split(spec)
    file = _file_of(target, base)
    if file is None:
        module = importlib.import_module(target)
    else:
        file = file.resolve()
        folder = str(file.parent)
        if folder not in sys.path:
            sys.path.insert(0, folder)
        module_name = file.stem if file.stem.isidentifier() else "diel_objective"
        loader_spec = importlib.util.spec_from_file_location(module_name, file)
        if loader_spec is None or loader_spec.loader is None:
            raise ImportError(f"cannot import {file}")
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[module_name] = module
        loader_spec.loader.exec_module(module)
    function = getattr(module, name, None)
    if not callable(function):
        raise AttributeError(f"{target} has no function {name!r}")
    return function
