"""Query a search's results from Python.

    mpiexec -n 4 diel run configs/mnist_grid.yaml
    python examples/query_results.py results/mnist_grid.db [study]

Written for configs/mnist_grid.yaml, whose parameters are learning_rate, layers, width
and activation. The database is only read (it can be read while the search is still
writing to it: SQLite WAL); a filter on a name the database does not have stops with a
line listing the names it does have.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from statistics import mean
from typing import Any

import diel.results
from diel.errors import ResultsError


def by_value(trials: list[dict[str, Any]], name: str, most: int = 8) -> str:
    """Mean accuracy of ``trials`` for each value of parameter ``name``, best first (for
    a parameter of at most ``most`` values, as in a grid)."""
    groups: dict[Any, list[float]] = defaultdict(list)
    for trial in trials:
        if name in trial["params"] and trial["accuracy"] is not None:
            groups[trial["params"][name]].append(trial["accuracy"])
    if len(groups) > most:
        return f"{len(groups)} different values"
    ranked = sorted(groups.items(), key=lambda item: -mean(item[1]))
    return ", ".join(f"{value}: {mean(accs):.3f} ({len(accs)})" for value, accs in ranked)


def main(db: str, study: str | None = None) -> None:
    with diel.results.open(db) as results:
        for s in results.studies():
            print(f"{s['name']}: {s['ok']} ok, {s['failed']} failed, {s['pruned']} pruned, "
                  f"{s['running']} running; best {s['direction']} {s['objective']} = {s['best']}")

        print("\nthe five best finished trials (as dicts):")
        for trial in results.trials(study=study, status="ok", top=5):
            print(f"  #{trial['number']}: objective {trial['objective']:.4f}, "
                  f"accuracy {trial['accuracy']}, {trial['params']}")

        # filters are KEY OP VALUE strings, all of which must hold; values are bound SQL
        # parameters. An unknown key is a ValueError naming the keys there are.
        fast_relu = results.trials(study=study, status="ok", sort="accuracy:desc",
                                   where=["activation=relu", "learning_rate>=0.1"])
        best = f"; the best reached accuracy {fast_relu[0]['accuracy']}" if fast_relu else ""
        print(f"\n{len(fast_relu)} relu trials with learning_rate >= 0.1{best}")

        print("\nmean accuracy of the finished trials for each value of each parameter:")
        finished = results.trials(study=study, status="ok")
        for name in sorted({name for trial in finished for name in trial["params"]}):
            print(f"  {name}: {by_value(finished, name)}")

        # the same rows as a table, CSV or JSON text, as `diel results` prints them
        print("\n" + diel.results.format_trials(results.trials(study=study, top=3), "table"))


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    try:
        main(*sys.argv[1:])
    except (ResultsError, ValueError) as e:  # not a results database, an unknown key
        sys.exit(f"query_results.py: {e}")
