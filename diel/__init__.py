"""diel: an openDIEL-style MPI executive for distributed hyperparameter search.

The package's parts: ``executive`` (the workflow, the ranks, the DAG), ``search`` (the
search master), ``worker`` (the user's code per trial), ``results`` (the database),
``plot``, ``dashboard``, and the ``diel`` command (``cli``); see docs/architecture.md.

The executive's modules lived at the top of the package before version 0.2 (``diel.config``,
``diel.interrupts``, ...). Those names still import, for one release, with a
``DeprecationWarning`` naming the new one (:class:`_MovedModules`).
"""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import sys
import warnings
from types import ModuleType
from typing import Sequence

__version__ = "0.1.0"

#: Old module names (before 0.2) and where they live now.
MOVED = {f"diel.{name}": f"diel.executive.{name}" for name in (
    "command", "config", "context", "coordinator", "interrupts", "layout", "logs",
    "messaging", "modules", "node", "placeholders", "waiting")}


class _MovedModules:
    """Imports an old module name as an alias of the module that replaced it, with a
    warning: the alias holds the same functions and classes (so ``isinstance`` checks
    agree) and looks up anything else in the new module. A finder and loader by their
    methods (``importlib.abc``'s classes would cost every process importing diel 20 ms
    of imports: ``importlib.resources`` and more)."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        """A new, empty module object for the old name (the default)."""

    def exec_module(self, module: ModuleType) -> None:
        new = MOVED[module.__name__]
        warnings.warn(f"{module.__name__} is now {new}; the old name goes away in the next "
                      "release", DeprecationWarning, stacklevel=2)
        target = importlib.import_module(new)
        module.__dict__.update({name: value for name, value in vars(target).items()
                                if not name.startswith("__")})
        module.__getattr__ = functools.partial(getattr, target)  # type: ignore[method-assign]


sys.meta_path.append(_MovedModules())
