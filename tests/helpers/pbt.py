"""What the PBT tests share (tests/search/test_pbt.py, test_pbt_sync.py): a space with
every kind of parameter, the settings of a pbt search, and epoch reports, checkpoints and
stored members made by hand, and a whole population run on worker threads."""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import Any, Callable

from diel.checkpoints import layout
from diel.results import Checkpoint, MemoryStorage, StoredTrial
from diel.search import parse_settings, run_search
from diel.search.space import param_key, parse_space
from diel.worker.inprocess import InProcessRunner
from diel.worker.serve import serve_tasks

P = "search"
SPACE = parse_space({"lr": {"loguniform": [1e-4, 0.1]}, "layers": {"int": [1, 8]},
                     "act": {"choice": ["relu", "tanh", "gelu"]},
                     "width": {"values": [16, 32, 64]}, "drop": {"uniform": [0.0, 0.5]}},
                    "space")
PARAMS = {"lr": 0.01, "layers": 3, "act": "relu", "width": 32, "drop": 0.2}


def settings(options: dict | None = None, **more):
    return parse_settings({"strategy": {"pbt": {"population": 4, "interval": 2,
                                                **(options or {})}},
                           "space": {"lr": {"loguniform": [1e-4, 0.1]}},
                           **(more if "objectives" in more else {"objective": "accuracy",
                                                                 **more})}, P)


def epoch(number: int, at: int, accuracy: float) -> dict:
    return {"trial": number, "epoch": at, "metrics": {"accuracy": accuracy}}


def checkpoint(number: int, step: int) -> Checkpoint:
    return Checkpoint(number, step, f"/c/trial-{number}/{step}", 8, "crc32:0")


def stored(number: int, lr: float, epochs: int, segments=(), checkpoints=(),
           status: str = "running") -> StoredTrial:
    params = {"lr": lr}
    return StoredTrial(number, params, param_key(params), status,
                       epochs={e: {"accuracy": lr * e} for e in range(1, epochs + 1)},
                       checkpoints=tuple(checkpoints), segments=tuple(segments))


def run_population(space: Any, function: Callable, params: dict, options: dict, root: Path,
                   out: io.StringIO | None = None) -> tuple[MemoryStorage, Any]:
    """A pbt search of 4 members (``options``: the strategy's, beside ``lr`` searched
    log-uniformly, seed 3) through ``space``, served by 4 worker threads running
    ``function`` in-process with ``params``, checkpoints under ``root``; its store
    (study ``s``) and the search's summary once the workers are done."""
    store = MemoryStorage()
    workers = [threading.Thread(target=serve_tasks, daemon=True, args=(
        space, "s", copy, InProcessRunner(function)),
        kwargs={"params": params, "checkpoints": layout.study_folder(root, "s")})
        for copy in range(4)]
    for worker in workers:
        worker.start()
    parsed = parse_settings({"strategy": {"pbt": options},
                             "space": {"lr": {"loguniform": [1e-4, 0.1]}},
                             "objective": "accuracy", "seed": 3}, P)
    summary = run_search(space, parsed, store, 4, study="s", out=out or io.StringIO(),
                         poll=0.02, checkpoints=root)
    for worker in workers:
        worker.join(timeout=10)
    return store, summary
