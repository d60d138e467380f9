"""The builtin ``trainer`` module (the worker running trainer.objective): settings, data
sets, and serving a real search."""

from __future__ import annotations

import pytest

import diel.results
from tests.helpers.launch import run_diel, run_diel_in_process
from diel.errors import ConfigError
from diel.worker.trainer_module import validate_settings
from trainer.objective import _architecture, load_dataset


def test_default_dataset_is_the_shipped_mnist_subset(tmp_path):
    x_train, y_train, x_test, y_test = load_dataset({}, tmp_path)
    assert x_train.shape == (4000, 784) and x_test.shape == (1000, 784)
    assert set(y_train.tolist()) == set(range(10))


def test_synthetic_dataset_shapes(tmp_path):
    data = load_dataset({"dataset": {"synthetic": {"samples": 50, "shape": [8], "classes": 3}}}, tmp_path)
    assert [part.shape[0] for part in data] == [40, 40, 10, 10]


@pytest.mark.parametrize("settings, key", [
    ({"dataset": "cifar"}, "modules.t.settings.dataset"),
    ({"dataset": {"synthetic": {"rows": 3}}}, "modules.t.settings.dataset"),
    ({"command": "python train.py"}, "modules.t.settings.command"),
    ({"timeout": -1}, "modules.t.settings.timeout"),
    ({"train_size": 0}, "modules.t.settings.train_size"),
    ({"study": 5}, "modules.t.settings.study"),
    ({"device": "tpu"}, "modules.t.settings.device"),
    ({"max_attempts": 0}, "modules.t.settings.max_attempts"),
    ({"isolate": "yes"}, "modules.t.settings.isolate"),
])
def test_bad_settings_name_their_key(settings, key):
    with pytest.raises(ConfigError) as error:
        validate_settings(settings, "modules.t.settings")
    assert error.value.path == key


def test_searched_layers_and_width_become_hidden_sizes():
    assert _architecture({"layers": 3, "width": 32, "lr": 0.1}) == {"hidden": [32, 32, 32], "lr": 0.1}


def test_bad_trainer_setting_fails_validation_with_its_path(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("modules:\n  space: {function: tuplespace}\n"
                    "  search: {function: search, settings: {space: {lr: {values: [0.1]}}}}\n"
                    "  trainer: {function: trainer, settings: {dataset: cifar}}\nservices: [space]\n")
    result = run_diel_in_process("validate", str(path))
    assert result.returncode == 2
    assert "modules.trainer.settings.dataset: expected mnist5k" in result.stderr


SEARCH_WORKFLOW = """
modules:
  space: {{function: tuplespace}}
  search:
    function: search
    settings:
      space:
        {searched}: {{values: {values}}}
        activation: {{values: [relu, tanh]}}
  trainer:
    function: trainer
    size: {size}
    copies: {copies}
    settings: {{train_size: 1000, epochs: 2, hidden: [32], {settings}}}
services: [space]
"""


def run_search_of_four_trials(tmp_path, **shape) -> None:
    """Run a 2x2 grid under mpiexec -n 4 and check every trial trained its 2 epochs."""
    path = tmp_path / "search.yaml"
    path.write_text(SEARCH_WORKFLOW.format(**shape))
    result = run_diel("run", str(path), n=4, timeout=180)
    assert result.returncode == 0, result.stderr
    with diel.results.open(tmp_path / "search.db") as results:
        rows = results.trials()
    assert len(rows) == 4
    assert all(row["status"] == "ok" and row["epoch"] == 2 for row in rows)
    assert all(0.5 < row["accuracy"] <= 1.0 and row["time"] > 0 for row in rows)


@pytest.mark.mpi
def test_trainer_module_serves_a_real_search(tmp_path):
    run_search_of_four_trials(tmp_path, searched="learning_rate", values="[0.05, 0.2]",
                              size=1, copies=2, settings="batch_size: 50")


@pytest.mark.mpi
def test_a_two_rank_trainer_copy_serves_a_search_data_parallel(tmp_path):
    run_search_of_four_trials(tmp_path, searched="batch_size", values="[25, 100]", size=2,
                              copies=1, settings="learning_rate: 0.1, schedule: date, "
                                                 "base_batch_size: 25, warmup_epochs: 0.2")
