"""The search's worker side: the ``worker`` module and the ``trial`` object.

A user's objective is ``def objective(trial): ...`` (see :class:`Trial`) or a program;
the ``worker`` module runs it per trial, isolated and time-limited. docs/workers.md
tells the whole story. Names load on first use, as :mod:`diel.results`' do: every rank
of ``diel run`` imports :mod:`diel.worker.early` before MPI starts, and only a worker's
needs the trial object.
"""

from diel.lazy import names_from

_HOMES = {"Trial": "trial", "TrialPruned": "trial", "TrialTimedOut": "trial"}

__all__ = list(_HOMES)
__getattr__ = names_from(__name__, _HOMES)
