"""The trainer's objective for the search: ``objective(trial)`` trains one network.

diel's builtin ``trainer`` module is the ``worker`` running this function; it knows
nothing of tasks or tags. ``trial.params`` holds the module's fixed settings overridden by
the trial's searched parameters::

    dataset: mnist5k         # or {mnist: DIR} (IDX files) or {synthetic: {samples, shape, classes}}
    train_size: 4000         # mnist5k: samples for training, the rest for validation
    device: auto             # auto (the trial's GPU when CuPy is installed), cpu, gpu, gpu:N

and everything else is a training setting (``epochs``, ``batch_size``, ``hidden``,
``activation``, ``optimizer``, ``learning_rate``, ...; :data:`TRAINER_KEYS` lists them
all, and :func:`validate_settings` refuses any other key, naming the closest one). A
searched ``layers`` and ``width`` become ``hidden: [width] * layers``. Large-batch and
memory settings pass through the same way: ``schedule: date`` with ``base_batch_size``,
``base_lr``, ``warmup_epochs``, ... (a search may then vary ``batch_size`` alone),
``mixed_precision``, ``offload``, ``memory`` (host, device, managed, cuda_managed).
When the trial spans several ranks (``trial.comm``), it trains data-parallel: each rank
computes a slice of every global batch, with one Allreduce per step (see
trainer.slicing and trainer.parallel).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import json
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from trainer.backend import cupy_or_none
from trainer.build import build_model
from trainer.data import load_mnist, load_mnist5k, prepare, split, synthetic
from trainer.memory import MemoryType
from trainer.model import DEFAULT_PARAMS
from trainer.optimizers import OPTIMIZERS
from trainer.results import EpochStats
from trainer.schedules import SCHEDULE_KEYS, SCHEDULES

__all__ = ["objective", "validate_settings", "load_dataset", "trial_metrics", "SettingsError",
           "DATA_KEYS", "TRAINER_KEYS"]

DATA_KEYS = ("dataset", "train_size", "device")
#: Keys :func:`trainer.build.build_model` reads itself (the rest go to the model, the
#: optimizer and the schedule).
NETWORK_KEYS = ("hidden", "activation", "dropout", "loss", "optimizer", "learning_rate", "lr")
#: A searched architecture: ``hidden: [width] * layers`` (see :func:`_architecture`).
ARCHITECTURE_KEYS = ("layers", "width")
#: Model settings the objective sets itself, never a workflow: ``comm`` is the trial's.
INTERNAL_KEYS = ("comm",)

Dataset = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
#: The values of the ``memory`` setting (where the model's arrays live).
MEMORY_TYPES = tuple(t.value for t in MemoryType)


class SettingsError(ValueError):
    """A trainer setting is wrong; ``path`` is its key path in the workflow."""

    def __init__(self, path: str, message: str) -> None:
        self.path, self.message = path, message
        super().__init__(f"{path}: {message}")


def _optimizer_keys() -> tuple[str, ...]:
    """Settings some optimizer of :data:`trainer.optimizers.OPTIMIZERS` takes."""
    names: dict[str, None] = {}
    for cls in OPTIMIZERS.values():
        for name in inspect.signature(cls.__init__).parameters:
            if name != "self":
                names[name] = None
    return tuple(names)


def _schedule_keys() -> tuple[str, ...]:
    """``schedule`` and the settings of every schedule of :data:`trainer.schedules.SCHEDULES`."""
    names = dict.fromkeys(SCHEDULE_KEYS)
    for cls in SCHEDULES.values():
        names.update(dict.fromkeys(f.name for f in dataclasses.fields(cls)))
    return tuple(names)


#: Every setting the objective understands, derived from the trainer library: the data
#: keys, the network's, the optimizers', the model's (:data:`trainer.model.DEFAULT_PARAMS`:
#: epochs, batch_size, precision and offload options, ...) and the schedules'.
TRAINER_KEYS = tuple(dict.fromkeys((
    *DATA_KEYS, *NETWORK_KEYS, *ARCHITECTURE_KEYS, *_optimizer_keys(),
    *(key for key in DEFAULT_PARAMS if key not in INTERNAL_KEYS), *_schedule_keys())))


def validate_settings(settings: Mapping[str, Any], path: str,
                      also_known: Sequence[str] = (), check_keys: bool = True) -> None:
    """Check the trainer settings before the workflow starts; SettingsError names the key.

    Every key must be one of :data:`TRAINER_KEYS` or of ``also_known`` (the worker's own
    keys, when the caller mixes them in): a typo such as ``epocs`` would otherwise train
    with the default silently. A misspelled key gets the closest known one as a hint.
    A fixed ``optimizer`` or ``schedule`` must name one the trainer has.
    ``check_keys=False`` skips these two checks (the settings fill an executable
    trainer's placeholders instead, so any key and value may be the program's).
    """
    if check_keys:
        _check_keys(settings, path, (*TRAINER_KEYS, *also_known))
        _check_name(settings, "optimizer", path, tuple(OPTIMIZERS))
        _check_name(settings, "schedule", path, ("constant", *SCHEDULES))
    _dataset_kind(settings.get("dataset", "mnist5k"), f"{path}.dataset")
    train_size = settings.get("train_size", 4000)
    if isinstance(train_size, bool) or not isinstance(train_size, int) or train_size < 1:
        raise SettingsError(f"{path}.train_size", f"expected a whole number >= 1, got {train_size!r}")
    memory = settings.get("memory")
    if memory is not None and memory not in MEMORY_TYPES:
        raise SettingsError(f"{path}.memory", f"expected {', '.join(MEMORY_TYPES)} (or leave it out: host on "
                                              f"the CPU, device on a GPU), got {memory!r}")
    device = settings.get("device", "auto")
    if not isinstance(device, str) or not (device in ("auto", "cpu", "gpu") or
                                           (device.startswith("gpu:") and device[4:].isdigit())):
        raise SettingsError(f"{path}.device", f"expected auto, cpu, gpu or gpu:N, got {device!r}")


def _check_keys(settings: Mapping[str, Any], path: str, known: Sequence[str]) -> None:
    """Every key is a known one; a typo is named with the closest known key."""
    for key in settings:
        if key in known:
            continue
        hint = difflib.get_close_matches(str(key), known, n=1)
        message = (f"unknown trainer setting; did you mean '{hint[0]}'? (the settings are "
                   "listed in docs/trainer.md)" if hint else
                   f"unknown trainer setting; known: {', '.join(known)}")
        raise SettingsError(f"{path}.{key}", message)


def _check_name(settings: Mapping[str, Any], key: str, path: str,
                choices: tuple[str, ...]) -> None:
    """A fixed ``optimizer`` or ``schedule`` names one the trainer has (any case)."""
    value = settings.get(key)
    if value is None or (isinstance(value, str) and value.lower() in choices):
        return
    hint = difflib.get_close_matches(str(value).lower(), choices, n=1)
    suggestion = f"did you mean '{hint[0]}'? " if hint else ""
    raise SettingsError(f"{path}.{key}", f"unknown {key} {value!r}; {suggestion}"
                                         f"expected one of {', '.join(choices)}")


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


def objective(trial: Any) -> dict[str, Any]:
    """Build the network from ``trial.params``, train it reporting every epoch, and
    return its last validation metrics with the training time and epochs run."""
    settings = dict(trial.params)
    dataset = settings.pop("dataset", "mnist5k")
    train_size = int(settings.pop("train_size", 4000))
    x_train, y_train, x_test, y_test = _cached_dataset(json.dumps(dataset, sort_keys=True),
                                                       train_size)
    settings["device"] = _device(str(settings.pop("device", "auto")), trial.device)
    merged = _architecture(settings)
    if trial.comm is not None:
        merged["comm"] = trial.comm
    classes = int(max(y_train.max(), y_test.max())) + 1
    model = build_model(merged, input_shape=x_train.shape[1:], classes=classes)

    def on_epoch(stats: EpochStats, _model: Any) -> bool:
        return trial.report(stats.epoch + 1, **trial_metrics(stats))

    result = model.fit(x_train, y_train, validation=(x_test, y_test), callback=on_epoch)
    last = trial_metrics(result.history[-1]) if result.history else {}
    return {**last, "time": result.time, "epoch": result.epochs}


@functools.lru_cache(maxsize=4)
def _cached_dataset(dataset_json: str, train_size: int) -> Dataset:
    """Load a data set once per process: a reused trial process trains many trials."""
    return load_dataset({"dataset": json.loads(dataset_json), "train_size": train_size})


def load_dataset(settings: Mapping[str, Any], base: Path = Path(".")) -> Dataset:
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


def _architecture(params: dict[str, Any]) -> dict[str, Any]:
    if "layers" in params or "width" in params:
        layers, width = int(params.pop("layers", 1)), int(params.pop("width", 128))
        params["hidden"] = [width] * layers
    return params


def _device(setting: str, gpu: int | None) -> str:
    """``auto``: the trial's GPU (``trial.device``) when CuPy can use it, else the CPU."""
    if setting != "auto":
        return setting
    return f"gpu:{gpu}" if gpu is not None and cupy_or_none() is not None else "cpu"
