"""Search strategies behind one interface, :class:`Sampler` (see
:mod:`diel.search.samplers.base` for the contract): ``grid`` and ``random`` here,
model-based ones on Optuna (:mod:`diel.search.samplers.optuna_based`), others from any
installed package through the entry-point group ``diel.samplers``."""

from diel.search.samplers.base import FINISHED, Observation, Sampler
from diel.search.samplers.registry import GROUP, load_sampler, parse_strategy, strategy_names

__all__ = ["Sampler", "Observation", "FINISHED", "GROUP", "load_sampler", "parse_strategy",
           "strategy_names"]
