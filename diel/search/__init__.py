"""Hyperparameter search: spaces, objectives, samplers, schedulers (pruners) and the
master module. The worker side of the protocol is :mod:`diel.worker`. See
docs/search.md, docs/workers.md and docs/extending.md.

Names load on first use, so that importing one part (the settings, to validate a
workflow) does not import the master and the results database with it.
"""

from importlib import import_module
from typing import Any

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


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'diel.search' has no attribute {name!r}")
    return getattr(import_module(f"diel.search.{_HOMES[name]}"), name)
