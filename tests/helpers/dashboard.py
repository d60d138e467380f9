"""What the dashboard tests share: the study 'alpha' written through diel's own storage
API (ResultsStore), and a digest of a folder's files (to show nothing was written)."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from pathlib import Path

from diel.results import EpochRecord, ResultRecord, ResultsStore, TrialStart
from diel.results._models import utcnow

SPACE = {"lr": {"loguniform": [1e-4, 1e-1]}, "act": {"choice": ["relu", "tanh"]}}
STATUSES = ["ok", "ok", "pruned", "ok", "failed", "ok"]   # trial n has STATUSES[n % 6]
ALPHA_TRIALS = 30
ALPHA_RUNNING = 2   # the last two trials of 'alpha' are still running


def write_alpha(store: ResultsStore, name: str = "alpha", trials: int = ALPHA_TRIALS,
                running: int = ALPHA_RUNNING) -> None:
    """A study of one objective: trial n has ``lr`` 10^-(1 + n % 3), ``act`` alternating,
    status ``STATUSES[n % 6]`` (the last ``running`` still running, the others run for
    0.5 s each, a second apart), worker copy n % 3,
    accuracy n / 100, epoch reports 1..3 (trial 5's loss NaN, as a diverging trial
    reports it; diel stores it as null) and trial 3 an extra metric f1."""
    state = store.open_study(name, "random", "accuracy", "maximize",
                             {"space": SPACE, "workers": "trainer", "seed": 7})
    params = [{"lr": 10.0 ** -(1 + n % 3), "act": ["relu", "tanh"][n % 2]} for n in range(trials)]
    store.record(state.study_id, starts=[TrialStart(n, params[n], f"k{n}") for n in range(trials)])
    start = utcnow()
    done = range(trials - running)
    epochs = [EpochRecord(n, e, {"accuracy": n / 100 * e / 3,
                                 "loss": float("nan") if n == 5 else 1 - n / 100 * e / 3},
                          worker=n % 3) for n in range(trials) for e in (1, 2, 3)]
    results = []
    for n in done:
        status = STATUSES[n % 6]
        results.append(ResultRecord(
            n, status, None if status == "failed" else n / 100, time=0.5 + n,
            accuracy=None if status == "failed" else n / 100, loss=1 - n / 100,
            worker=n % 3, epoch=3, error="planted failure" if status == "failed" else None,
            metrics={"f1": 0.5} if n == 3 else {},
            started_at=start + timedelta(seconds=n - 0.5),
            finished_at=start + timedelta(seconds=n)))
    store.record(state.study_id, epochs=epochs, results=results)


def digest(folder: Path) -> dict[str, str]:
    """Each file in ``folder`` by name, with the SHA-256 of its bytes."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.iterdir()) if p.is_file()}

