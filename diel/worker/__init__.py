"""The search's worker side: the ``worker`` module and the ``trial`` object.

A user's objective is ``def objective(trial): ...`` (see :class:`Trial`) or a program;
the ``worker`` module runs it per trial, isolated and time-limited. docs/workers.md
tells the whole story.
"""

from diel.worker.trial import Trial, TrialPruned, TrialTimedOut

__all__ = ["Trial", "TrialPruned", "TrialTimedOut"]
