"""The memory a rank's or a child's checkpoint writer keeps for a trial's next checkpoint
is given back when the trial ends (TrialLink.finish, the child's Parent.flush)."""

from __future__ import annotations

import numpy as np

from diel.worker.child import Parent
from tests.helpers.links import ScriptedLink


def state(step: int) -> dict:
    return {"x": np.full(1 << 16, float(step))}


def test_a_trial_in_the_rank_gives_its_checkpoint_memory_back_when_it_ends(tmp_path):
    link = ScriptedLink(folder=tmp_path / "s", number=4)
    for step in (1, 2):
        link.save(step, state(step))
    assert link.writer.writer.pool.nbytes > 0
    link.finish(paused=False)
    assert link.writer.writer.pool.nbytes == 0
    assert link.reports("checkpoint")[-1]["step"] == 2   # (1 may be dropped for 2)


def test_an_isolated_child_gives_its_checkpoint_memory_back_when_its_trial_ends(tmp_path):
    parent = Parent(conn=None)    # flush() sends nothing: the rank's end of the socket is not needed
    writer = parent.writer_for(str(tmp_path / "s"), 4)
    writer.checkpoint(4, 1, state(1), lambda written: None, lambda key, step, reason: None)
    assert writer.pool.nbytes > 0
    assert parent.flush() is None
    assert writer.pool.nbytes == 0 and (tmp_path / "s" / "trial-4" / "step-1.ckpt").exists()
