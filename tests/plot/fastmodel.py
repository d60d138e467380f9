"""A stand-in for the trainer with the shipped configs' parameters: learning curves
that depend on the parameters as a real model's would, in milliseconds per trial, so
the plot tests can run the shipped grid and random searches for real under mpiexec."""

from __future__ import annotations

import math
import time

ACTIVATION = {"relu": 0.03, "tanh": 0.02, "sigmoid": -0.25}


def objective(trial):
    p = trial.params
    ceiling = (0.93 - 0.1 * abs(math.log10(p["learning_rate"]) + 1.0)
               - 0.02 * (p["layers"] - 1) + 0.02 * p["width"] / 256
               + ACTIVATION[p["activation"]] + 0.02 * p.get("momentum", 0.0))
    speed = 0.3 + 2.0 * p["learning_rate"]
    for epoch in range(1, p["epochs"] + 1):
        accuracy = 0.1 + (ceiling - 0.1) * (1.0 - math.exp(-speed * epoch))
        loss = 2.3 * (1.0 - accuracy)
        time.sleep(0.01)
        if trial.report(epoch, accuracy=accuracy, loss=loss):
            break
    return {"accuracy": accuracy, "loss": loss}
