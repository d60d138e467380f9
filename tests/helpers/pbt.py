"""What the PBT tests share (tests/search/test_pbt.py, test_pbt_sync.py): a space with
every kind of parameter, the settings of a pbt search, and epoch reports, checkpoints and
stored members made by hand."""

from __future__ import annotations

from diel.results import Checkpoint, StoredTrial
from diel.search import parse_settings
from diel.search.space import param_key, parse_space

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
