"""Hyperparameter search: spaces, objectives, samplers, schedulers (pruners) and the
master module. The worker side of the protocol is :mod:`diel.worker`. See
docs/search.md, docs/workers.md and docs/extending.md.

Names load on first use, so that importing one part (the settings, to validate a
workflow) does not import the master and the results database with it.
"""

from diel.lazy import names_from

_HOMES = {
    "main": "master", "run_search": "master", "SearchSummary": "master",
    "Expression": "objective", "Objective": "objective", "Threshold": "objective",
    "HalvingPruner": "schedulers", "HyperbandPruner": "schedulers",
    "MedianPruner": "schedulers",
    "SearchSettings": "settings", "parse_settings": "settings",
    "validate_settings": "settings",
    "SearchSpace": "space", "param_key": "space", "parse_space": "space",
}

__all__ = list(_HOMES)
__getattr__ = names_from(__name__, _HOMES)
