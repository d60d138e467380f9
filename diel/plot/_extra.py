"""The plotting libraries are an extra (``pip install 'diel[plot]'``): importing one that
is missing raises :class:`MissingExtra`, naming what needs it and how to install it."""

from __future__ import annotations

from importlib import import_module
from types import ModuleType

from diel.errors import DielError

__all__ = ["MissingExtra", "require", "INSTALL"]

INSTALL = "pip install 'diel[plot]'"


class MissingExtra(DielError, ImportError):
    """A library of the ``plot`` extra is not installed (a usage error: exit status 2)."""


def require(module: str, purpose: str) -> ModuleType:
    """Import ``module`` for ``purpose`` (e.g. ``"writing PNG files"``), or raise
    :class:`MissingExtra` saying what to install (the import's error chained)."""
    try:
        return import_module(module)
    except ImportError as e:
        raise MissingExtra(f"{purpose} needs {module.split('.')[0]}, which is not installed "
                           f"({e}); install the plotting extra: {INSTALL}") from e
