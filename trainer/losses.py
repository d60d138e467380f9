"""Losses: softmax cross-entropy (from logits, via log-sum-exp) and mean squared error.

A loss's ``forward(output, target)`` returns the mean loss over the batch as a 0-d array
on the model's device (so a GPU need not stop to copy it to the host each batch) and keeps
what ``backward()`` needs to return d loss / d output. Targets are integer class labels of
shape (N,) or one-hot/probability rows of shape (N, C). Its batch-sized arrays are buffers
from the model's allocator (:class:`~trainer.allocator.BufferCache`), reused every batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trainer.allocator import BufferCache
from trainer.backend import get_array_module
from trainer.errors import ConfigError

__all__ = ["Loss", "CrossEntropy", "MeanSquaredError", "get_loss"]


class Loss(BufferCache):
    """Base class: ``forward`` returns the batch-mean loss, ``backward`` its gradient.

    ``memory`` (set by the model) makes its buffers; used alone it takes the plain
    allocator for the arrays it is given."""

    #: True when the loss expects logits and fuses a preceding softmax (see Output).
    fuses_softmax = False

    def forward(self, output: Any, target: Any) -> Any:
        """Mean loss over the batch (a 0-d array); remembers what backward needs."""
        raise NotImplementedError

    def backward(self) -> Any:
        """d loss / d output for the last forward."""
        raise NotImplementedError


def _labels_or_rows(target: Any, n: int, c: int) -> tuple[Any, Any]:
    """(labels, None) for integer labels, (None, rows) for (N, C) target rows."""
    if target.ndim == 1:
        if target.shape[0] != n:
            raise ValueError(f"{target.shape[0]} labels for a batch of {n}")
        return target, None
    if target.shape != (n, c):
        raise ValueError(f"target of shape {target.shape} for output of shape {(n, c)}")
    return None, target


class CrossEntropy(Loss):
    """Softmax cross-entropy on logits: ``mean(logsumexp(z) - z[label])``.

    Computed with the row maximum subtracted, so large logits neither overflow nor give
    ``log(0)``; the gradient is ``(softmax(z) - onehot) / N``.
    """

    fuses_softmax = True

    def __init__(self) -> None:
        self._grad: Any = None
        self._labels: Any = None
        self._rows: Any = None

    def forward(self, output: Any, target: Any) -> Any:
        xp = self.xp = get_array_module(output)
        n, c = output.shape
        labels, rows = _labels_or_rows(target, n, c)
        shifted = self.buffer("shifted", output.shape, output.dtype)
        xp.subtract(output, output.max(axis=1, keepdims=True), out=shifted)
        exp = self.buffer("exp", output.shape, output.dtype)
        xp.exp(shifted, out=exp)
        total = exp.sum(axis=1, keepdims=True)
        log_z = xp.log(total)
        if labels is not None:
            picked = xp.take_along_axis(shifted, labels.reshape(-1, 1).astype(np.int64, copy=False), axis=1)
            loss = (log_z - picked).sum() / n
        else:
            shifted -= log_z  # log-probabilities
            shifted *= rows
            loss = -shifted.sum() / n
        exp /= total
        self._grad, self._labels, self._rows = exp, labels, rows
        return loss

    def backward(self) -> Any:
        xp = get_array_module(self._grad)
        grad, n = self._grad, self._grad.shape[0]
        if self._labels is not None:
            grad[xp.arange(n), self._labels] -= 1
        else:
            grad -= self._rows
        grad /= n
        return grad


class MeanSquaredError(Loss):
    """``mean over batch of sum over outputs of (output - target)^2 / outputs`` (i.e. the mean
    over all elements, as PyTorch's MSELoss); integer labels are one-hot encoded."""

    def __init__(self) -> None:
        self._diff: Any = None

    def forward(self, output: Any, target: Any) -> Any:
        xp = self.xp = get_array_module(output)
        if target.ndim == 1 and output.ndim == 2 and output.shape[1] > 1:
            rows = self.buffer("onehot", output.shape, output.dtype)
            rows[...] = 0
            rows[xp.arange(output.shape[0]), target] = 1
            target = rows
        diff = self._diff = self.buffer("diff", output.shape, output.dtype)
        xp.subtract(output, target.reshape(output.shape), out=diff)
        square = self.buffer("square", output.shape, output.dtype)
        xp.multiply(diff, diff, out=square)
        return square.mean()

    def backward(self) -> Any:
        grad = self.buffer("grad", self._diff.shape, self._diff.dtype)
        get_array_module(grad).multiply(self._diff, 2.0 / self._diff.size, out=grad)
        return grad


_LOSSES = {"cross_entropy": CrossEntropy, "crossentropy": CrossEntropy, "categorical_crossentropy": CrossEntropy,
           "mse": MeanSquaredError, "mean_squared_error": MeanSquaredError}


def get_loss(loss: str | Loss) -> Loss:
    """A loss from its name (``cross_entropy``, ``mse``) or the instance itself."""
    if isinstance(loss, Loss):
        return loss
    cls = _LOSSES.get(str(loss).lower())
    if cls is None:
        raise ConfigError(f"unknown loss {loss!r}: choose 'cross_entropy' or 'mse'")
    return cls()
