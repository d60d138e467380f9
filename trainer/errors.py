"""The trainer's exceptions: one root, specific subclasses that also inherit the builtin that fits.

The search catches :class:`TrainerError` around a trial and records the trial as failed
with the message, so every message says what was wrong and where.
"""

from __future__ import annotations

__all__ = [
    "TrainerError",
    "DeviceError",
    "MemoryTypeError",
    "ShapeMismatchError",
    "DataFileError",
    "TrainingDiverged",
    "ConfigError",
]


class TrainerError(Exception):
    """Root of every error the trainer raises on purpose."""


class DeviceError(TrainerError, RuntimeError):
    """A device was asked for that this machine cannot provide (no CuPy, no GPU, bad id)."""


class MemoryTypeError(TrainerError, RuntimeError):
    """A memory type or copy the current backend cannot do (e.g. DEVICE memory without CuPy)."""


class ShapeMismatchError(TrainerError, ValueError):
    """Two layers disagree about a shape; found when the model is built, naming the layer."""


class DataFileError(TrainerError, OSError):
    """A data file is missing, truncated or not in the expected format; names the path."""


class ConfigError(TrainerError, ValueError):
    """A bad setting: unknown activation, loss, optimizer, or an out-of-range value."""


class TrainingDiverged(TrainerError, ArithmeticError):
    """The loss became NaN or infinite; ``epoch`` and ``batch`` say when (both 0-based)."""

    def __init__(self, message: str, epoch: int, batch: int, loss: float) -> None:
        super().__init__(message)
        self.epoch = epoch
        self.batch = batch
        self.loss = loss
