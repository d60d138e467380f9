"""The search's worker side: the ``worker`` module and the ``trial`` object.

A user's objective is ``def objective(trial): ...`` (see :class:`Trial`) or a program;
the ``worker`` module runs it per trial, isolated and time-limited. docs/workers.md
tells the whole story. Names load on first use, as :mod:`diel.results`' do: every rank
of ``diel run`` imports :mod:`diel.worker.early` before MPI starts, and only a worker's
needs the trial object.
"""

from importlib import import_module
from typing import Any

_HOMES = {"Trial": "trial", "TrialPruned": "trial", "TrialTimedOut": "trial"}

__all__ = list(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'diel.worker' has no attribute {name!r}")
    return getattr(import_module(f"diel.worker.{_HOMES[name]}"), name)
