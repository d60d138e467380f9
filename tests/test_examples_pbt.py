"""The population-based training examples (examples/pbt): the workflows validate; each
objective called by hand with a hand-made trial that keeps its checkpoints, so that
resuming (a member's own checkpoint) and exploiting (a donor's, with new parameters) are
checked without MPI; and the search run under mpiexec from a copy of its folder."""

from __future__ import annotations

import importlib.util
import shutil
from typing import Any, Callable

import numpy as np
import pytest

import diel.results
from diel.checkpoints import Snapshot, take
from diel.worker import Trial
from tests.helpers.launch import REPO, run_diel, run_diel_in_process

EXAMPLE = REPO / "examples" / "pbt"
EXAMPLES = ["train", "train_torch"]


def load_objective(name: str) -> Callable[[Any], dict]:
    """``objective`` of examples/pbt/<name>.py, imported under a name of its own."""
    if name == "train_torch":
        pytest.importorskip("torch", reason="the PyTorch example needs pip install -e '.[examples]'")
    spec = importlib.util.spec_from_file_location(f"example_pbt_{name}", EXAMPLE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.objective


class Member:
    """A hand-made trial's worker side: keeps each checkpoint as diel would (serialized by
    ``take``), records the reports, restores from ``resume`` when given."""

    def __init__(self, resume: tuple[int, Snapshot] | None = None) -> None:
        self.saved: dict[int, Snapshot] = {}
        self.reports: list[int] = []
        self.resume = resume

    def trial(self, epochs: int, **params: Any) -> Trial:
        return Trial(params={"epochs": epochs, "seed": 3, **params}, number=0, study="pbt",
                     _reporter=self.report, _checkpointer=self.checkpoint, _restorer=self.restore)

    def report(self, step: int, metrics: dict) -> bool:
        self.reports.append(step)
        return False

    def checkpoint(self, step: int, state: Any) -> None:
        self.saved[step] = take(state)

    def restore(self) -> tuple[int, Any] | None:
        return None if self.resume is None else (self.resume[0], self.resume[1].load())


def arrays(state: Any) -> list[np.ndarray]:
    """Every array of a checkpoint's state, in a fixed order (tensors as NumPy)."""
    if isinstance(state, dict):
        return [a for key in sorted(state, key=str) for a in arrays(state[key])]
    if isinstance(state, (list, tuple)):
        return [a for item in state for a in arrays(item)]
    if hasattr(state, "numpy"):
        return [state.numpy()]
    return [np.asarray(state)] if isinstance(state, np.ndarray) else []


PARAMS = {"learning_rate": 0.05, "momentum": 0.9}


@pytest.mark.parametrize("name", EXAMPLES)
def test_a_resumed_member_ends_bitwise_as_an_uninterrupted_one(name):
    objective = load_objective(name)
    whole = Member()
    expected = objective(whole.trial(4, **PARAMS))
    first = Member()
    objective(first.trial(2, **PARAMS))
    resumed = Member(resume=(2, first.saved[2]))
    assert objective(resumed.trial(4, **PARAMS)) == expected
    assert resumed.reports == [3, 4]
    ours, theirs = arrays(resumed.saved[4].load()), arrays(whole.saved[4].load())
    assert len(ours) == len(theirs) > 2
    assert all(np.array_equal(a, b) for a, b in zip(ours, theirs))


@pytest.mark.parametrize("name", EXAMPLES)
def test_an_exploiting_member_trains_on_from_the_donor_with_its_new_parameters(name):
    """A member handed a donor's checkpoint with perturbed parameters goes on from the
    donor's step and trains with the new parameters, not the donor's saved ones."""
    objective = load_objective(name)
    donor = Member()
    objective(donor.trial(2, **PARAMS))
    same = Member(resume=(2, donor.saved[2]))
    objective(same.trial(3, **PARAMS))
    perturbed = Member(resume=(2, donor.saved[2]))
    objective(perturbed.trial(3, learning_rate=0.01, momentum=0.5))
    assert perturbed.reports == [3]
    weights, donors = arrays(perturbed.saved[3].load()), arrays(same.saved[3].load())
    assert not all(np.array_equal(a, b) for a, b in zip(weights, donors))
    if name == "train_torch":
        group = perturbed.saved[3].load()["optimizer"]["param_groups"][0]
        assert (group["lr"], group["momentum"]) == (0.01, 0.5)


@pytest.mark.parametrize("workflow", ["search.yaml", "search_torch.yaml"])
def test_the_example_workflows_validate_on_six_ranks(workflow):
    result = run_diel_in_process("validate", f"examples/pbt/{workflow}")
    assert result.returncode == 0, result.stderr
    assert f"run it with: mpiexec -n 6 diel run examples/pbt/{workflow}" in result.stdout


@pytest.mark.mpi
@pytest.mark.slow
def test_the_example_search_exploits_and_records_each_members_schedule(tmp_path):
    """The search of search.yaml (four members, 8 epochs, a decision every 2) ends with
    every member trained to its end, some member exploited another, and each member's
    lineage starts from its draw and changes parameters only within the space."""
    folder = tmp_path / "pbt"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("*.db", "*.db-*", "*.checkpoints",
                                                                   "__pycache__"))
    result = run_diel("run", str(folder / "search.yaml"), n=6, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    with diel.results.open(folder / "search.db") as results:
        trials = results.trials()
        lineages = {t["number"]: results.lineage(t["number"]) for t in trials}
    assert sorted(t["number"] for t in trials) == [0, 1, 2, 3]
    assert all(t["status"] == "ok" and t["epoch"] == 8 for t in trials), trials
    assert max(t["accuracy"] for t in trials) > 0.9, trials
    exploits = [s for segments in lineages.values() for s in segments[1:]]
    assert exploits, lineages
    for trial in trials:
        segments = lineages[trial["number"]]
        assert (segments[0].index, segments[0].from_step, segments[0].parent_trial) == (0, 0, None)
        assert [s.from_step for s in segments] == sorted(s.from_step for s in segments)
        assert segments[-1].params == {k: trial["params"][k] for k in segments[-1].params}
        for segment in segments:
            assert 0.001 <= segment.params["learning_rate"] <= 0.5
            assert 0.5 <= segment.params["momentum"] <= 0.99
    for segment in exploits:   # a donor's step, or the member's own when its donor had none
        assert segment.parent_trial in lineages and 0 < segment.from_step <= 8
        assert segment.parent_step == segment.from_step
