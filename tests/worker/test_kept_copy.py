"""The copy of a checkpoint kept in the tuple space is checked once, when it is put: a
file damaged by then is not kept (its readers skip the pass over the bytes)."""

from __future__ import annotations

import logging
import time

import numpy as np
import pytest

from diel.checkpoints import take, write
from diel.worker.link import TrialLink
from diel.worker.resume import resume_point
from tests.helpers.tuplespace import InProcSpace


@pytest.fixture
def space():
    space = InProcSpace(n_servers=1, n_clients=1)
    yield space.clients[0]
    space.stop()


def test_a_checkpoint_damaged_before_it_is_kept_stays_out_of_memory_with_a_warning(space, tmp_path, caplog):
    link = TrialLink(space, "s", 0, 7, time.perf_counter(), keep_copies=True)
    good = write(take({"weights": np.full(50_000, 1.0)}), tmp_path / "step-1.ckpt", 1)
    link.checkpointed(good)
    assert link.memory_image(good.nbytes) is not None   # kept: PBT keeps each at once
    bad = write(take({"weights": np.full(50_000, 2.0)}), tmp_path / "step-2.ckpt", 2)
    with open(bad.path, "r+b") as f:   # damage on its way back from the disk
        f.seek(-5, 2)
        f.write(b"\xff")
    with caplog.at_level(logging.WARNING, logger="diel.worker"):
        link.checkpointed(bad)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "step-2.ckpt is not kept in memory: damaged" in warnings[0]
    assert link.memory_image(bad.nbytes) is not None   # still the copy of step 1
    restore = {"step": 2, "path": bad.path, "nbytes": bad.nbytes, "checksum": bad.checksum,
               "older": [{"step": 1, "path": good.path, "nbytes": good.nbytes,
                          "checksum": good.checksum}]}
    lines: list[str] = []
    step, snapshot = resume_point(restore, 7, link.memory_image, lines.append)
    assert step == 1 and (snapshot.load()["weights"] == 1.0).all()   # from its file
    assert len(lines) == 1 and "damaged" in lines[0]
