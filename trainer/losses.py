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
from trainer.backend import cupy_or_none, get_array_module
from trainer.errors import ConfigError
from trainer.fused import elementwise

__all__ = ["Loss", "CrossEntropy", "MeanSquaredError", "get_loss"]


class Loss(BufferCache):
    """Base class: ``forward`` returns the batch-mean loss, ``backward`` its gradient.

    ``memory`` (set by the model) makes its buffers; used alone it takes the plain
    allocator for the arrays it is given."""

    #: True when the loss expects logits and fuses a preceding softmax (see Output).
    fuses_softmax = False
    #: True when forward and backward may be captured into a CUDA graph (device operations
    #: on its buffers alone; see trainer.graph); False for a custom loss unless it says so.
    graph_safe = False

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
    ``log(0)``; the gradient is ``(softmax(z) - onehot) / N``. On a GPU (float32/float64
    logits, integer labels) one kernel computes each row's loss and its gradient row
    (:data:`_ROWS`), instead of a dozen passes.
    """

    fuses_softmax = True
    graph_safe = True

    def __init__(self) -> None:
        self._grad: Any = None
        self._labels: Any = None
        self._rows: Any = None
        self._done = False  # the GPU kernel computed the gradient with the loss

    def forward(self, output: Any, target: Any) -> Any:
        xp = self.xp = get_array_module(output)
        n, c = output.shape
        labels, rows = _labels_or_rows(target, n, c)
        self._done = labels is not None and _fusable(output)
        if self._done:
            grad = self.buffer("exp", output.shape, output.dtype)
            losses = self.buffer("row_loss", (n,), output.dtype)
            elementwise("cross_entropy_rows", *_ROWS)(output, labels, c, 1.0 / n, losses, grad)
            self._grad, self._labels, self._rows = grad, labels, None
            return losses.sum() / n
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
        if self._done:  # the fused forward wrote the gradient already
            return self._grad
        xp = get_array_module(self._grad)
        grad, n = self._grad, self._grad.shape[0]
        if self._labels is not None:
            grad[xp.arange(n), self._labels] -= 1
        else:
            grad -= self._rows
        grad /= n
        return grad


#: One GPU kernel per row i of logits z (c columns): the row's loss into ``loss`` and its
#: gradient row ``(softmax - onehot) * inv_n`` into ``grad``.
_ROWS = ("raw T z, raw L labels, int32 c, T inv_n", "T loss, raw T grad", """
    const ptrdiff_t row = i * c;
    T top = z[row];
    for (int j = 1; j < c; ++j) top = max(top, z[row + j]);
    T total = 0;
    for (int j = 0; j < c; ++j) total += exp(z[row + j] - top);
    const int label = (int)labels[i];
    loss = log(total) - (z[row + label] - top);
    for (int j = 0; j < c; ++j) grad[row + j] = (exp(z[row + j] - top) / total - (j == label ? (T)1 : (T)0)) * inv_n;
""")


def _fusable(output: Any) -> bool:
    """Whether ``output`` is a float32/float64 C-contiguous 2-D CuPy array (the kernel's layout)."""
    cp = cupy_or_none()
    return (cp is not None and isinstance(output, cp.ndarray) and output.dtype in (np.float32, np.float64)
            and output.flags.c_contiguous)


class MeanSquaredError(Loss):
    """``mean over batch of sum over outputs of (output - target)^2 / outputs`` (i.e. the mean
    over all elements, as PyTorch's MSELoss); integer labels are one-hot encoded."""

    graph_safe = True

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
