"""The population-based training examples (examples/pbt): each objective called by hand
with a hand-made trial that keeps its checkpoints, so that resuming (a member's own
checkpoint) and exploiting (a donor's, with new parameters) are checked without MPI."""

from __future__ import annotations

import importlib.util
from typing import Any, Callable

import numpy as np
import pytest

from diel.checkpoints import Snapshot, take
from diel.worker import Trial
from tests.helpers.launch import REPO

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
