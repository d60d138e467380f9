"""``mpiexec -n 2 python two_rank_restore.py FOLDER``: trial 0 of a two-rank copy in the
ranks, resumed from a checkpoint of step 2 that rank 0 writes first. Each rank writes what
its call of ``counting`` returned to ``FOLDER/rank-<r>.json``; rank 0 also the steps its
link was asked to save."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

from diel.checkpoints import checkpoint_path, take, write
from diel.worker.inprocess import InProcessRunner
from tests.worker.checkpointing import SIZE, counting


class Link:
    """Rank 0's line to a master that lets the trial run; it keeps what it is asked to save."""

    def __init__(self) -> None:
        self.saved: list[int] = []

    def report(self, step: int, metrics: dict) -> str:
        return "go"

    def save(self, step: int, snapshot) -> None:
        self.saved.append(step)

    def memory_image(self, nbytes: int) -> None:
        return None   # nothing in memory: the file serves


def main(folder: Path) -> None:
    comm = MPI.COMM_WORLD
    results = {}

    def recording(trial):
        results.update(counting(trial))
        return results

    runner = InProcessRunner(recording, comm)
    if comm.Get_rank() == 0:
        written = write(take({"weights": np.full(SIZE, 2.0)}), checkpoint_path(folder, 0, 2), 2)
        restore = {"step": 2, "path": written.path, "nbytes": written.nbytes,
                   "checksum": written.checksum, "older": []}
        info = {"number": 0, "study": "s", "copy": 0, "device": None, "params": {"epochs": 4},
                "restore": restore, "checkpoints": str(folder)}
        link = Link()
        outcome = runner.run(info, link, None)
        runner.stop_followers()
        results.update(status=outcome.status, saved=link.saved)
    else:
        runner.follow()
    (folder / f"rank-{comm.Get_rank()}.json").write_text(json.dumps(results))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
