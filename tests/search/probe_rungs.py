"""Trials that count the epochs they train, for the tests of pruning at the rung: each
epoch is one line ``number epoch rank`` appended to the file ``log`` before its report,
and a trial stops at the first report that says so."""

from __future__ import annotations

import os
import sys
import time


def note(log: str, number: int, epoch: int, rank: int = 0) -> None:
    """Append ``number epoch rank`` to ``log`` (one write: lines from ranks never mix)."""
    descriptor = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(descriptor, f"{number} {epoch} {rank}\n".encode())
    finally:
        os.close(descriptor)


def trains(trial) -> dict:
    """Up to ``epochs`` epochs (default 9) at accuracy ``quality`` * epoch / 9, each after
    the first taking ``pace`` seconds (the time an order has to stop the trial before its
    next epoch); every rank of the copy notes each epoch it trains."""
    params = trial.params
    accuracy = 0.0
    for epoch in range(1, int(params.get("epochs", 9)) + 1):
        time.sleep(float(params.get("pace", 0)) if epoch > 1 else 0)
        note(params["log"], trial.number, epoch, trial.rank)
        accuracy = params["quality"] * epoch / 9
        if trial.report(epoch, accuracy=accuracy):
            break
    return {"accuracy": accuracy}


def program() -> None:
    """The same as a program: ``probe_rungs.py LOG NUMBER QUALITY EPOCHS PACE``, reporting
    through ``$DIEL_REPORT_FILE`` and leaving its result in ``$DIEL_RESULT_FILE``."""
    log, number, quality, epochs, pace = sys.argv[1:6]
    accuracy = 0.0
    for epoch in range(1, int(epochs) + 1):
        time.sleep(float(pace) if epoch > 1 else 0)
        note(log, int(number), epoch)
        accuracy = float(quality) * epoch / 9
        with open(os.environ["DIEL_REPORT_FILE"], "a") as reports:
            reports.write(f'{{"step": {epoch}, "accuracy": {accuracy}}}\n')
    with open(os.environ["DIEL_RESULT_FILE"], "w") as result:
        result.write(f'{{"accuracy": {accuracy}}}')


def trained(log: str) -> dict[int, list[int]]:
    """The epochs each trial trained (on rank 0 of its copy), in order."""
    epochs: dict[int, list[int]] = {}
    with open(log) as lines:
        for line in lines:
            number, epoch, rank = map(int, line.split())
            if rank == 0:
                epochs.setdefault(number, []).append(epoch)
    return epochs


if __name__ == "__main__":
    program()
