"""The ``trainer`` module: trains the search's trials (builtin name ``trainer``).

Each copy of the module is one worker of the search. Rank 0 of the copy takes a task
from the tuple space, builds the network from the trial's parameters on top of the
fixed settings, trains on the configured data set while reporting every epoch, and
puts the result; the other ranks of a copy (``size: K``) train the same trial
data-parallel (each rank computes a slice of every global batch; one Allreduce per step,
see trainer.parallel). With ``command:`` the trial is an external program instead.

Settings (``settings:`` of the module; everything not listed is a fixed training
setting such as ``epochs``, ``batch_size``, ``hidden``, ``activation``, ``optimizer``,
``learning_rate``, that a trial's parameters override)::

    study: mnist_grid        # the search's study (default: the workflow name)
    dataset: mnist5k         # or {mnist: DIR} (IDX files) or {synthetic: {samples, shape, classes}}
    train_size: 4000         # mnist5k: samples for training, the rest for validation
    device: auto             # auto (a GPU per local rank when CuPy sees one), cpu, gpu, gpu:N
    command: [python, train.py, --lr, "{learning_rate}"]   # an executable trainer
    timeout: 600             # seconds per trial of the executable trainer

A searched ``layers`` and ``width`` become ``hidden: [width] * layers``. Large-batch and
memory settings pass through the same way: ``schedule: date`` with ``base_batch_size``,
``base_lr``, ``warmup_epochs``, ... (a search may then vary ``batch_size`` alone),
``mixed_precision``, ``offload``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from trainer.backend import cupy_or_none
from trainer.build import build_model
from trainer.data import load_mnist, load_mnist5k, prepare, split, synthetic
from trainer.errors import TrainerError
from trainer.results import EpochStats
from trainer.worker import ReportEpoch, run_command_trial, serve_tasks
from tuplespace.backoff import wait_for

__all__ = ["main", "validate_settings", "load_dataset", "trial_metrics", "SettingsError"]

MODULE_KEYS = ("study", "dataset", "train_size", "command", "timeout")
TASK_TAG = 7  # rank 0 hands each trial's parameters to the other ranks of its copy

Dataset = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


class SettingsError(ValueError):
    """A trainer setting is wrong; ``path`` is its key path in the workflow."""

    def __init__(self, path: str, message: str) -> None:
        self.path, self.message = path, message
        super().__init__(f"{path}: {message}")


def validate_settings(settings: Mapping[str, Any], path: str) -> None:
    """Check the module's settings before the workflow starts; SettingsError names the key."""
    if "command" in settings:
        command = settings["command"]
        if not isinstance(command, list) or not command or not all(
                isinstance(item, (str, int, float)) for item in command):
            raise SettingsError(f"{path}.command", "expected a non-empty list: the program and "
                                                   "its arguments ({name} for parameters)")
    timeout = settings.get("timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or timeout <= 0):
        raise SettingsError(f"{path}.timeout", f"expected a positive number of seconds, got {timeout!r}")
    _dataset_kind(settings.get("dataset", "mnist5k"), f"{path}.dataset")
    train_size = settings.get("train_size", 4000)
    if isinstance(train_size, bool) or not isinstance(train_size, int) or train_size < 1:
        raise SettingsError(f"{path}.train_size", f"expected a whole number >= 1, got {train_size!r}")
    study = settings.get("study")
    if study is not None and (not isinstance(study, str) or not study):
        raise SettingsError(f"{path}.study", f"expected the search's study name, got {study!r}")


def _dataset_kind(dataset: Any, path: str) -> str:
    if dataset == "mnist5k":
        return "mnist5k"
    if isinstance(dataset, dict) and len(dataset) == 1:
        kind, value = next(iter(dataset.items()))
        if kind == "mnist" and isinstance(value, str):
            return kind
        if kind == "synthetic" and isinstance(value, dict) and set(value) <= {"samples", "shape",
                                                                               "classes", "seed"}:
            return kind
    raise SettingsError(path, f"expected mnist5k, {{mnist: DIR}} or {{synthetic: {{samples: N, "
                              f"shape: [784], classes: 10}}}}, got {dataset!r}")


def main(ctx: Any) -> None:
    """Serve the search's tasks until the master says stop (see the module docstring)."""
    settings = dict(ctx.config)
    study = settings.get("study") or ctx.workflow_name
    fixed = {key: value for key, value in settings.items() if key not in MODULE_KEYS}
    if "command" in settings:
        run_trial = _command_trial(settings, fixed, Path(ctx.workflow_dir))
    else:
        data = load_dataset(settings, Path(ctx.workflow_dir))
        fixed["device"] = _device(str(settings.get("device", "auto")), ctx.local_rank)
        run_trial = _network_trial(data, fixed, ctx.comm)
    if ctx.rank != 0:
        _follow(ctx.comm, run_trial)
        return
    if ctx.size > 1:
        run_trial = _leading(ctx.comm, run_trial)
    served = serve_tasks(ctx.space, study, ctx.copy, run_trial)
    for rank in range(1, ctx.size):
        ctx.comm.send(None, dest=rank, tag=TASK_TAG)
    ctx.log.info("worker copy %d trained %d trial(s)", ctx.copy, served)


def load_dataset(settings: Mapping[str, Any], base: Path) -> Dataset:
    """``(x_train, y_train, x_test, y_test)`` for the configured data set."""
    kind = _dataset_kind(settings.get("dataset", "mnist5k"), "dataset")
    if kind == "mnist5k":
        x, y = prepare(*load_mnist5k())
        return split(x, y, n_train=int(settings.get("train_size", 4000)))
    spec = settings["dataset"][kind]
    if kind == "mnist":
        folder = base / spec
        return (*prepare(*load_mnist(folder, "train")), *prepare(*load_mnist(folder, "test")))
    samples = int(spec.get("samples", 5000))
    shape = tuple(spec.get("shape", (784,)))
    classes, seed = int(spec.get("classes", 10)), int(spec.get("seed", 0))
    x, y = synthetic(samples, shape, classes, seed)
    cut = samples * 4 // 5
    return x[:cut], y[:cut], x[cut:], y[cut:]


def trial_metrics(stats: EpochStats) -> dict[str, float]:
    """What the search sees of an epoch: validation accuracy and loss when there are any."""
    metrics = {"train_accuracy": stats.accuracy, "train_loss": stats.loss}
    metrics["accuracy"] = stats.val_accuracy if stats.val_accuracy is not None else stats.accuracy
    metrics["loss"] = stats.val_loss if stats.val_loss is not None else stats.loss
    return metrics


def _network_trial(data: Dataset, fixed: Mapping[str, Any], comm: Any) -> Callable[..., dict]:
    x_train, y_train, x_test, y_test = data
    input_shape, classes = x_train.shape[1:], int(max(y_train.max(), y_test.max())) + 1

    def run_trial(params: Mapping[str, Any], report_epoch: ReportEpoch | None) -> dict:
        merged = _architecture({**fixed, **params})
        if comm.size > 1:
            merged["comm"] = comm
        model = build_model(merged, input_shape=input_shape, classes=classes)

        def on_epoch(stats: EpochStats, _model: Any) -> bool:
            return report_epoch is not None and report_epoch(stats.epoch + 1, trial_metrics(stats))

        result = model.fit(x_train, y_train, validation=(x_test, y_test), callback=on_epoch)
        last = trial_metrics(result.history[-1]) if result.history else {}
        return {**last, "time": result.time, "epoch": result.epochs}

    return run_trial


def _architecture(params: dict[str, Any]) -> dict[str, Any]:
    if "layers" in params or "width" in params:
        layers, width = int(params.pop("layers", 1)), int(params.pop("width", 128))
        params["hidden"] = [width] * layers
    return params


def _command_trial(settings: Mapping[str, Any], fixed: Mapping[str, Any],
                   base: Path) -> Callable[..., dict]:
    argv = [str(item) for item in settings["command"]]
    if argv[0] in ("python", "python3"):
        argv[0] = sys.executable  # the same environment as diel
    timeout = settings.get("timeout")

    def run_trial(params: Mapping[str, Any], report_epoch: ReportEpoch | None) -> dict:
        return run_command_trial(argv, {**fixed, **params}, timeout=timeout, cwd=base)

    return run_trial


def _device(setting: str, local_rank: int) -> str:
    """``auto`` means one GPU per rank, chosen by the rank's place on its node."""
    if setting != "auto":
        return setting
    cupy = cupy_or_none()
    if cupy is None:
        return "cpu"
    return f"gpu:{local_rank % cupy.cuda.runtime.getDeviceCount()}"


def _leading(comm: Any, run_trial: Callable[..., dict]) -> Callable[..., dict]:
    """Rank 0's trial: first hand the parameters to the rest of the copy."""

    def run_shared(params: Mapping[str, Any], report_epoch: ReportEpoch) -> dict:
        for rank in range(1, comm.size):
            comm.send(dict(params), dest=rank, tag=TASK_TAG)
        return run_trial(params, report_epoch)

    return run_shared


def _follow(comm: Any, run_trial: Callable[..., dict]) -> None:
    """Ranks 1.. of a copy: train each trial rank 0 hands over, until it sends None."""
    while (params := wait_for(lambda: comm.improbe(source=0, tag=TASK_TAG)).recv()) is not None:
        try:
            run_trial(params, None)
        except TrainerError:  # the copy trains in step, so rank 0 saw it too and reports it
            pass
