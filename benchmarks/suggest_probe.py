"""The trial function of the suggest round-trip measurement (benchmarks/optuna_bench.py):
it times ``trial.suggest_float`` for parameters the space does not declare (each asks
the search master: one round trip) and for declared ones (checked on the worker's rank),
and returns the mean cost of one call of each, in milliseconds."""

from __future__ import annotations

import time

ASKED = 50      # undeclared parameters a trial suggests: x0, x1, ...
DECLARED = 10   # declared ones (the workflow's space: d0, d1, ...)


def probe(trial) -> dict[str, float]:
    started = time.perf_counter()
    for i in range(ASKED):
        trial.suggest_float(f"x{i}", 0.0, 1.0)
    asked = (time.perf_counter() - started) / ASKED
    started = time.perf_counter()
    for i in range(DECLARED):
        trial.suggest_float(f"d{i}", 0.0, 1.0)
    declared = (time.perf_counter() - started) / DECLARED
    return {"value": 0.0, "suggest_ms": asked * 1e3, "declared_ms": declared * 1e3}
