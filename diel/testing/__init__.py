"""Conformance suites for diel's extension points, shipped in the package (as Optuna's
``optuna.testing`` is) so that a plug-in's own tests can run the checks diel runs on its
builtins: :mod:`diel.testing.samplers` for a search strategy, :mod:`diel.testing.schedulers`
for a scheduler, :mod:`diel.testing.storages` for a results storage.

Each suite is a class of ``test_*`` methods; a test module subclasses it, naming the class
under test, and pytest collects the subclass (it needs no pytest import of its own)::

    from diel.testing.schedulers import SchedulerSuite
    from mypkg.patience import Patience

    class TestPatience(SchedulerSuite):
        scheduler_class = Patience
        options = {"patience": 2}

A failed check raises :class:`AssertionError` saying what the contract asks and what the
plug-in did; the checks do not use ``assert`` statements, so they hold under ``python -O``
too. docs/extending.md lists the extension points and their suites.
"""
