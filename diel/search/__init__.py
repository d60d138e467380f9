"""Hyperparameter search: spaces, objectives, samplers, schedulers (pruners) and the
master module. The worker side of the protocol is :mod:`diel.worker`. See
docs/search.md, docs/workers.md and docs/extending.md."""

from diel.search.master import SearchSummary, main, run_search
from diel.search.objective import Expression, Objective, Threshold
from diel.search.schedulers import HalvingPruner, HyperbandPruner, MedianPruner
from diel.search.settings import SearchSettings, parse_settings, validate_settings
from diel.search.space import SearchSpace, param_key, parse_space

__all__ = ["main", "validate_settings", "run_search", "SearchSummary", "SearchSettings",
           "parse_settings", "SearchSpace", "parse_space", "param_key", "Expression",
           "Objective", "Threshold", "MedianPruner", "HalvingPruner", "HyperbandPruner"]
