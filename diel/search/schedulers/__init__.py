"""Schedulers behind one interface, :class:`Scheduler` (see
:mod:`diel.search.schedulers.base` for the contract): each answers a running trial's
epoch reports with a :class:`Decision` (continue, stop or pause today; exploit later).
``median``, ``halving`` and ``hyperband`` here, others from any installed package
through the entry-point group ``diel.schedulers``; the workflow names one under the
search's ``pruner:`` key."""

from diel.search.schedulers.base import CARRIED_OUT, SHARED_OPTIONS, Action, Decision, \
    Pruner, Scheduler, check_option_names
from diel.search.schedulers.halving import HalvingPruner
from diel.search.schedulers.hyperband import HyperbandPruner
from diel.search.schedulers.median import MedianPruner
from diel.search.schedulers.registry import GROUP, load_scheduler, parse_pruner, \
    scheduler_names

__all__ = ["Scheduler", "Pruner", "Action", "Decision", "CARRIED_OUT", "SHARED_OPTIONS",
           "check_option_names", "MedianPruner", "HalvingPruner", "HyperbandPruner", "GROUP",
           "load_scheduler", "parse_pruner", "scheduler_names"]
