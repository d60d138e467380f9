"""An objective written exactly in Optuna's style, for the define-by-run searches under
mpiexec: a conditional classifier choice, ``report(value, step)``, ``should_prune()`` and
``raise optuna.TrialPruned()``. Deterministic: a trial's parameters give its value
again when it is called by hand. ``trial.params["sleep"]`` (a worker's fixed param, 0
by default) slows each step, for the tests that stop a job while it runs."""

from __future__ import annotations

import json
import math
import time

import optuna

STEPS = 4


def objective(trial) -> float:
    name = trial.suggest_categorical("classifier", ["SVC", "RandomForest"])
    if name == "SVC":
        c = trial.suggest_float("svc_c", 1e-10, 1e10, log=True)
        accuracy = 1.0 - abs(math.log10(c)) / 20
    else:
        depth = trial.suggest_int("rf_max_depth", 2, 32, log=True)
        accuracy = 0.4 + depth / 100
    for step in range(STEPS):
        time.sleep(float(trial.params.get("sleep", 0)))
        trial.report(accuracy * (step + 1) / STEPS, step)
        if trial.should_prune():
            raise optuna.TrialPruned()
    return accuracy


def on_every_rank(trial) -> float:
    """:func:`objective` in a copy of several ranks, each rank appending the parameters
    it trained with to the file ``trial.params["log"]``."""
    try:
        return objective(trial)
    finally:   # pruned trials too
        with open(trial.params["log"], "a") as log:
            log.write(json.dumps({"number": trial.number, "rank": trial.rank,
                                  "params": trial.params}) + "\n")
