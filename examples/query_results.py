"""Query a search's results from Python.

    python examples/query_results.py results/mnist_grid.db [study]

The same database can be read while the search is still writing to it (SQLite WAL).
"""

from __future__ import annotations

import sys

import diel.results


def main(db: str, study: str | None = None) -> None:
    with diel.results.open(db) as results:
        for s in results.studies():
            print(f"{s['name']}: {s['ok']} ok, {s['failed']} failed, {s['pruned']} pruned, "
                  f"{s['running']} running; best {s['direction']} {s['objective']} = {s['best']}")

        # the five best finished trials, as dicts
        for trial in results.trials(study=study, status="ok", top=5):
            print(trial["number"], trial["objective"], trial["params"])

        # filters are KEY OP VALUE strings; values are bound SQL parameters
        relu_small_lr = results.trials(study=study, where=["activation=relu", "lr<0.01"],
                                       sort="accuracy:desc")
        print(f"{len(relu_small_lr)} relu trials with lr < 0.01")

        # the same rows as a table, CSV or JSON text, as `diel results` prints them
        print(diel.results.format_trials(results.trials(study=study, top=3), "table"))


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    main(*sys.argv[1:])
