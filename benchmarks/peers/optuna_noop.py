"""Optuna's side of the search benchmark: no-op trials of a random search stored in SQLite.

Run by benchmarks/search_bench.py in a fresh process, timed from launch to exit (Optuna is
not a diel dependency)::

    python benchmarks/peers/optuna_noop.py --trials 2000 --jobs 1 --db DB --out TIMES.json

``RandomSampler(seed=1)``, one float parameter, ``RDBStorage`` on the SQLite file ``--db``
with diel's durability: every connection in WAL mode with ``synchronous=NORMAL`` (and the
same busy timeout), set by a connection creator handed to SQLAlchemy. Optuna's per-trial
INFO log lines are turned off (verbosity WARNING), as diel prints no per-trial line.
``--jobs`` > 1 runs the trials in that many threads (``optimize(n_jobs=...)``). Writes
the per-trial completion times (``datetime_complete``, epoch seconds) as JSON to ``--out``.
"""

import argparse
import json
import sqlite3
from pathlib import Path

BUSY_TIMEOUT_S = 30


def connector(path: Path):
    """A SQLAlchemy ``creator``: a sqlite3 connection with diel's pragmas."""
    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_S * 1000}")
        return conn
    return connect


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, required=True)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--db", type=Path, required=True, help="SQLite file to create")
    parser.add_argument("--out", type=Path, required=True, help="JSON file for the timestamps")
    args = parser.parse_args()

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.RDBStorage(f"sqlite:///{args.db}",
                                         engine_kwargs={"creator": connector(args.db)})
    study = optuna.create_study(storage=storage, direction="maximize",
                                sampler=optuna.samplers.RandomSampler(seed=1))

    def objective(trial: "optuna.Trial") -> float:
        return 1 - abs(trial.suggest_float("x", 0, 1) - 0.3)

    study.optimize(objective, n_trials=args.trials, n_jobs=args.jobs)
    done = [t.datetime_complete.timestamp() for t in study.trials
            if t.state == optuna.trial.TrialState.COMPLETE]
    args.out.write_text(json.dumps({"completions": done}))


if __name__ == "__main__":
    main()
