"""A package's names, loaded on first use (PEP 562's module ``__getattr__``).

``import diel.results`` (or ``diel.search``, ``diel.worker``, ``diel.checkpoints``,
``diel.plot``) then imports none of the package's modules: a rank imports only the
modules whose names it uses, and a name's module comes with the name, on first use. Each
package lists its names and the module each lives in (its ``_HOMES``) and sets
``__getattr__ = names_from(__name__, _HOMES)``.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any, Callable, Mapping

__all__ = ["names_from"]


def names_from(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: a name of ``homes`` is taken from its
    module (``package.homes[name]``), imported then; any other name is the usual
    :class:`AttributeError`."""

    def load(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(f"{package}.{homes[name]}"), name)

    return load
