"""Finding the user's objective function from ``run: train.py:objective`` or
``run: package.module:objective``, checked before the workflow starts and loaded once
per process (in the isolated child, or in the rank itself)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any, Callable

__all__ = ["check_run_spec", "load_function"]


def _split(spec: str) -> tuple[str, str]:
    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name.isidentifier():
        raise ValueError(f"expected 'file.py:function' or 'package.module:function', got {spec!r}")
    return target, name


def _file_of(target: str, base: Path) -> Path | None:
    """The Python file a ``file.py`` target names (relative to ``base``), else None."""
    if not target.endswith(".py"):
        return None
    path = Path(target)
    return path if path.is_absolute() else base / path


def check_run_spec(spec: Any, base: Path) -> None:
    """Raise ValueError when ``spec`` cannot name a function (the file is missing, the
    module cannot be found); nothing is imported, so user code does not run at validation."""
    if not isinstance(spec, str):
        raise ValueError(f"expected 'file.py:function' or 'package.module:function', got {spec!r}")
    target, _ = _split(spec)
    file = _file_of(target, base)
    if file is not None:
        if not file.is_file():
            raise ValueError(f"no such file: {file}")
        return
    try:
        found = importlib.util.find_spec(target)
    except (ImportError, ValueError) as e:
        raise ValueError(f"cannot find module {target!r}: {e}") from None
    if found is None:
        raise ValueError(f"cannot find module {target!r} (looked beside the workflow and on "
                         "sys.path)")


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
