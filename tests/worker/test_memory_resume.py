"""A resume served from the tuple space on the server's node maps the server's memory file:
in the rank (``TrialLink.memory_image``) and in an isolated child, which gets the file's
descriptor and maps it itself (``TrialLink.memory_copy``); the restored state is the
trial's to change."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from diel.checkpoints import take, write
from diel.worker.isolated import IsolatedRunner
from diel.worker.link import TrialLink
from diel.worker.resume import resume_point
from tests.helpers.tuplespace import InProcSpace
from tests.worker.checkpointing import SIZE
from tuplespace import memfiles

pytestmark = pytest.mark.skipif(not memfiles.supported(), reason="no memory files (not Linux)")

HERE = Path(__file__).resolve().parent
LARGE = (1 << 20) // 8 + 64   # float64s: a checkpoint over MAP_MIN_BYTES


@pytest.fixture
def space():
    space = InProcSpace(n_servers=1, n_clients=1)
    yield space.clients[0]
    space.stop()


def kept(space, folder: Path, weights: np.ndarray, step: int = 2) -> dict:
    """Trial 7's checkpoint of ``step``, kept in ``space`` as a PBT donor's is, its file
    then deleted (only the copy in memory is left); the task's ``restore`` of it."""
    link = TrialLink(space, "s", 0, 7, time.perf_counter(), keep_copies=True)
    written = write(take({"weights": weights}), folder / f"step-{step}.ckpt", step)
    link.checkpointed(written)
    os.unlink(written.path)
    return {"step": step, "path": written.path, "nbytes": written.nbytes,
            "checksum": written.checksum, "older": []}


def test_a_resume_in_the_rank_maps_the_copy_and_may_change_what_it_restored(space, tmp_path):
    restore = kept(space, tmp_path, np.full(LARGE, 2.0))
    link = TrialLink(space, "s", 0, 7, time.perf_counter())
    step, snapshot = resume_point(restore, 7, link.memory_image, pytest.fail)
    weights = snapshot.load()["weights"]
    assert step == 2 and (weights == 2.0).all() and space.dist_reads == {"mapped": 1, "copied": 0}
    weights += 1.0   # training on: the trial's own pages
    again = resume_point(restore, 7, link.memory_image, pytest.fail)[1].load()["weights"]
    assert (again == 2.0).all() and (weights == 3.0).all()


def test_an_isolated_childs_copy_is_the_servers_own_file_not_one_of_the_rank(space, tmp_path):
    restore = kept(space, tmp_path, np.full(LARGE, 2.0))
    link = TrialLink(space, "s", 0, 7, time.perf_counter())
    fd = link.memory_copy(restore["nbytes"])
    shared = space.dist_open("s/ckpt/7", timeout=0)
    try:
        assert os.fstat(fd).st_ino == os.fstat(shared).st_ino   # no copy into a file of its own
    finally:
        os.close(fd)
        os.close(shared)
    assert link.memory_copy(restore["nbytes"] + 64) is None   # another checkpoint's size


def test_an_isolated_trial_resumes_from_the_servers_file_mapped_in_its_child(space, tmp_path, monkeypatch):
    monkeypatch.setattr(memfiles, "MAP_MIN_BYTES", 4096)   # the objective's 16 kB state
    restore = kept(space, tmp_path, np.full(SIZE, 3.0), step=3)
    runner = IsolatedRunner("checkpointing.py:counting", HERE, dict(os.environ), grace=1.0)
    try:
        link = TrialLink(space, "s", 0, 7, time.perf_counter())
        info = {"number": 7, "study": "s", "copy": 0, "device": None, "params": {"epochs": 4},
                "restore": restore, "checkpoints": str(tmp_path / "later")}
        outcome = runner.run(info, link, None)
    finally:
        runner.close()
    assert outcome.metrics["resumed"] == 3 and outcome.metrics["total"] == 4 * SIZE
    assert space.dist_reads == {"mapped": 1, "copied": 0}
