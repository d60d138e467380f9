"""Everything benchmarks/scale_sim.py needs of diel, in one place, so that a change of
diel's API costs a change here only.

It runs the real search master (``diel.search.master.run_search``: the engine, the
sampler, the pass loop with its bulk commits and prefetch) on a real results store (the
SQL store on a SQLite file, opened by ``diel.results.get_storage``), with the simulated
world of scale_sim_world as its tuple space and clock; and it writes the workers' reports
exactly as diel's worker does (``diel.worker.outcome.result_report``, the epoch report
of ``diel.worker.serve``).
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

import diel.results
from diel.errors import ConfigError
from diel.results import Storage, get_storage
from diel.search.master import run_search
from diel.search.protocol import report_tag, task_tag
from diel.search.settings import parse_settings
from diel.worker.outcome import TrialOutcome, result_report

__all__ = ["SimStudy", "available", "STUDY", "SPACE"]

STUDY = "scale_sim"
# The space of configs/mnist_random.yaml, with wider bounds: what a trainer search varies.
SPACE = {
    "learning_rate": {"loguniform": [1.0e-4, 0.5]},
    "momentum": {"uniform": [0.0, 0.99]},
    "layers": {"int": [1, 4]},
    "width": {"choice": [64, 128, 256, 512]},
    "activation": {"choice": ["relu", "tanh", "sigmoid"]},
}


class SimStudy:
    """One simulated search: ``trials`` trials of ``strategy`` for ``workers`` workers,
    recorded in ``folder``/scale_sim.db, or in ``database`` (a SQLAlchemy URL of an
    existing database) under a study name of its own, with the master's ``prefetch``
    setting (docs/search.md; None: what ``auto`` picks for trials longer than a master
    pass, none queued for a strategy that learns from results, else one). Trial ``n``
    lasts a log-normal number of simulated seconds with mean ``mean`` and log-space
    spread ``sigma``; its accuracy is a smooth function of its parameters plus noise, so
    that a model-based sampler has something to model."""

    def __init__(self, strategy: str, trials: int, workers: int, folder: str | Path,
                 mean: float, sigma: float = 0.5, seed: int = 1, epochs: int = 0,
                 database: str | None = None, prefetch: int | str | None = None) -> None:
        self.workers, self.epochs = workers, epochs
        self.url = database or f"sqlite:///{Path(folder) / 'scale_sim.db'}"
        self.study = f"{STUDY}_{secrets.token_hex(4)}" if database else STUDY
        settings = {"strategy": strategy, "space": SPACE, "max_trials": trials, "seed": seed,
                    "objective": "accuracy", "direction": "maximize"}
        if prefetch is None:
            prefetch = 0 if _learns(parse_settings(settings, "scale_sim")) else 1
        self.settings = parse_settings({**settings, "prefetch": prefetch}, "scale_sim")
        rng = np.random.default_rng(seed)
        self.durations = rng.lognormal(math.log(mean) - sigma ** 2 / 2, sigma, trials)
        self.noise = rng.normal(0.0, 0.005, trials)
        self.task_tag, self.report_tag = task_tag(self.study), report_tag(self.study)

    @property
    def queued(self) -> int:
        """Tasks the master queues per worker beyond the one it runs (``auto``: its depth
        for trials longer than a pass)."""
        if self.settings.prefetch is not None:
            return self.settings.prefetch
        return 0 if _learns(self.settings) else 1

    def duration(self, number: int) -> float:
        return float(self.durations[number])

    def accuracy(self, number: int, params: dict[str, Any]) -> float:
        """Best near learning_rate 0.03, momentum 0.9, 2-3 layers, relu, wide."""
        score = (0.97 - 0.03 * (math.log10(params["learning_rate"]) + 1.5) ** 2
                 - 0.05 * (params["momentum"] - 0.9) ** 2 - 0.01 * abs(params["layers"] - 2.5)
                 - 0.02 * (params["activation"] != "relu") - 2.0 / params["width"])
        return min(1.0, max(0.0, score + float(self.noise[number])))

    def result(self, task: dict, worker: int, seconds: float) -> dict:
        """The result report diel's worker puts for a trial that ran ``seconds``."""
        number = task["trial"]
        accuracy = self.accuracy(number, task["params"])
        outcome = TrialOutcome("ok", {"time": seconds, "accuracy": accuracy, "loss": 1.0 - accuracy},
                          step=self.epochs)
        return result_report(number, worker, outcome, 0.0)

    def epoch(self, task: dict, worker: int, k: int, elapsed: float) -> dict:
        """The epoch report diel's worker puts (``trial.report(k, ...)``)."""
        accuracy = self.accuracy(task["trial"], task["params"]) * (0.5 + 0.5 * k / self.epochs)
        return {"kind": "epoch", "trial": task["trial"], "epoch": k, "worker": worker,
                "metrics": {"time": elapsed, "accuracy": accuracy, "loss": 1.0 - accuracy}}

    def example_task(self) -> dict:
        """A task as the master puts it, to measure what a message costs."""
        return {"trial": 12345, "params": self.settings.space.sample(1, 12345)}

    def run(self, space: Any, cost: Callable[[], float] = time.process_time) -> float:
        """Run the master to the end of the study, with ``space`` (the simulated world)
        as its tuple space and its ``clock`` as the master's clock; return the seconds
        (on the ``cost`` clock, the world's) its commits (``Storage.record``) took."""
        log = logging.getLogger("scale_sim.master")
        log.setLevel(logging.WARNING)
        store = _TimedStore(get_storage(self.url), cost)
        try:
            with open(os.devnull, "w") as out:
                run_search(space, self.settings, store, self.workers, self.study,  # type: ignore[arg-type]
                           log=log, out=out, clock=space.clock)
        finally:
            store.close()
        return store.record_s

    def recorded(self) -> dict[str, list[int]]:
        """The trial numbers the database holds, by status (read-only)."""
        found: dict[str, list[int]] = {}
        with diel.results.open(self.url) as results:
            for trial in results.trials(study=self.study):
                found.setdefault(trial["status"], []).append(trial["number"])
        return found


def _learns(settings: Any) -> bool:
    """Whether the strategy learns from results (``prefetch: auto`` queues nothing for it)."""
    return bool(getattr(settings.sampler, "learns_from_results", False))


class _TimedStore:
    """A results store that adds up the time its commits (``record``) take on ``cost``."""

    def __init__(self, store: Storage, cost: Callable[[], float]) -> None:
        self._store, self._cost = store, cost
        self.record_s = 0.0

    def record(self, *args: Any, **kwargs: Any) -> None:
        started = self._cost()
        try:
            self._store.record(*args, **kwargs)
        finally:
            self.record_s += self._cost() - started

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def available(strategies: list[str]) -> list[str]:
    """Those of ``strategies`` this diel's search accepts."""
    found = []
    for strategy in strategies:
        try:
            parse_settings({"strategy": strategy, "space": SPACE, "max_trials": 1}, "scale_sim")
        except ConfigError:
            continue
        found.append(strategy)
    return found
