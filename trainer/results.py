"""What training returns: per-epoch statistics and the fit result, and the stop signal."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional, Union

from trainer.errors import TrainerError

__all__ = ["EpochStats", "FitResult", "StopTraining", "Callback"]


@dataclass
class EpochStats:
    """One epoch: mean training loss and running accuracy over its batches, the
    validation loss/accuracy when validation data was given (else None), seconds taken."""

    epoch: int
    loss: float
    accuracy: float
    val_loss: Optional[float] = None
    val_accuracy: Optional[float] = None
    time: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """Plain dict, e.g. the ``metrics`` of a search ``epoch`` report."""
        return asdict(self)


@dataclass
class FitResult:
    """What :meth:`NeuralNetwork.fit` returns.

    ``time`` is the wall time of the training loop in seconds (validation included),
    ``loss``/``accuracy`` those of the last epoch, ``val_*`` the last validation figures
    (None without validation), ``epochs`` the number of epochs run and ``stopped_early``
    whether a callback stopped training before ``epochs`` were done.
    """

    time: float
    loss: float
    accuracy: float
    val_loss: Optional[float]
    val_accuracy: Optional[float]
    epochs: int
    stopped_early: bool = False
    history: list[EpochStats] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict (history as a list of dicts), ready for JSON or the tuple space."""
        return asdict(self)


class StopTraining(TrainerError):
    """Raise from an epoch callback to stop training after this epoch (no error results)."""


#: An epoch callback: called after every epoch with its stats and the model; returning
#: True (or raising StopTraining) stops training, any other return value continues.
Callback = Callable[[EpochStats, Any], Union[bool, None]]
