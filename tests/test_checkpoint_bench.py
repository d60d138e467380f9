"""The checkpoint benchmark (benchmarks/checkpoint_bench.py): its states have the size
asked, and a smallest run prints every table, with the peer it cannot run said so."""

from __future__ import annotations

import subprocess
import sys
from importlib.util import find_spec

import pytest

from tests.helpers.launch import REPO

# torch (and the benchmark's state, made of torch tensors) is imported by the test that
# uses it, not when the file is collected (on every worker of every run of the suite)
pytestmark = pytest.mark.skipif(find_spec("torch") is None, reason="torch is not installed")
sys.path.insert(0, str(REPO / "benchmarks"))


@pytest.mark.parametrize("mib", [1, 3, 10])
def test_a_state_has_the_size_asked_and_is_the_same_each_time(mib):
    import torch
    from checkpoint_state import MIB, make_state, state_bytes

    state = make_state(mib)
    assert state_bytes(state) == mib * MIB
    assert all(t.dtype == torch.float32 for t in state["model"].values())
    assert torch.equal(make_state(mib)["model"]["layer0.weight"], state["model"]["layer0.weight"])


@pytest.mark.mpi
@pytest.mark.slow
def test_a_smallest_run_prints_every_table_and_says_what_it_did_not_measure(tmp_path):
    done = subprocess.run([sys.executable, "benchmarks/checkpoint_bench.py", "--sizes", "1",
                           "--repeats", "1", "--epochs", "1", "--dir", str(tmp_path),
                           "--ray-python", str(tmp_path / "no-python")],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for table in ("| state | diel blocks | diel durable | torch.save + fsync |",
                  "| state | diel from memory, in the rank | touched | diel from memory, isolated | "
                  "touched | diel from disk |",
                  "| epoch without checkpoints | epoch with a checkpoint each | overhead |"):
        assert table in out
    assert f"Ray Tune: not measured: --ray-python {tmp_path / 'no-python'}: No such file" in out
    assert "not judged, 100 MiB not run" in out
    assert "Target: overhead ≤ 2% of epoch time: " in out
    assert list(tmp_path.iterdir()) == []      # its files removed
