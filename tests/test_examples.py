"""The examples in examples/ run as the README says."""

from __future__ import annotations

import pytest

from tests.helpers.launch import REPO, run_diel, run_diel_in_process


@pytest.mark.mpi
def test_producer_consumer_example():
    result = run_diel("run", "-v", "examples/producer_consumer.yaml", n=3, timeout=60)
    assert result.returncode == 0, result.stderr
    for iteration in range(3):
        assert f"iteration {iteration}: sum of squares" in result.stderr
    assert "group 'exchange' finished (3 iteration(s))" in result.stderr


@pytest.mark.mpi
def test_executable_module_example():
    result = run_diel("run", "examples/executable_module.yaml", n=2, timeout=60)
    assert result.returncode == 0, result.stderr
    for rank in range(2):
        for iteration in range(2):
            assert f"rank {rank}/2 iteration {iteration}: pi ~" in result.stdout
    assert '"samples": 20000' in result.stderr


@pytest.mark.parametrize("config", sorted(p.name for p in (REPO / "configs").glob("*.yaml")))
def test_shipped_configs_validate(config):
    """Every shipped workflow passes `diel validate` and says it runs on 4 ranks, as the
    README's commands assume."""
    result = run_diel_in_process("validate", f"configs/{config}")
    assert result.returncode == 0, result.stderr
    assert f"run it with: mpiexec -n 4 diel run configs/{config}" in result.stdout
