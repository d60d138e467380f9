"""Element-wise activations (sigmoid, relu, tanh, softmax, identity) and the Output layer.

Each activation writes its output into a reused buffer and computes its derivative from
that output alone, so the layer never keeps its input. Sigmoid is computed as
``0.5 * tanh(0.5 x) + 0.5``, which cannot overflow; softmax subtracts the row maximum.
On a GPU (float32 or float64) sigmoid and the backward passes of sigmoid, tanh and relu
are each one fused CuPy kernel instead of several passes (each a kernel launch); after a
FullyConnected layer, sigmoid, tanh and relu also add that layer's bias in the same kernel
(:func:`fuse_bias`, which the model calls for a GPU model).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trainer.backend import cupy_or_none
from trainer.errors import ConfigError
from trainer.fused import elementwise
from trainer.layers.base import Layer, Shape
from trainer.layers.dense import FullyConnected

__all__ = ["Activation", "Output", "ACTIVATIONS", "fuse_bias"]

ACTIVATIONS = ("sigmoid", "relu", "tanh", "softmax", "identity")
_ALIASES = {"linear": "identity", "none": "identity", "logistic": "sigmoid"}


#: One-kernel GPU versions: (inputs, body) of a CuPy ElementwiseKernel writing ``out``.
_FUSED = {
    "sigmoid": ("T x", "out = (T)0.5 * tanh((T)0.5 * x) + (T)0.5"),
    "sigmoid_grad": ("T g, T y", "out = g * ((T)1 - y) * y"),
    "tanh_grad": ("T g, T y", "out = g * ((T)1 - y * y)"),
    "relu_grad": ("T g, T y", "out = y > (T)0 ? g : (T)0"),
    # the previous FullyConnected layer's bias added in the same pass (b broadcast over rows)
    "bias_sigmoid": ("T x, T b", "out = (T)0.5 * tanh((T)0.5 * (x + b)) + (T)0.5"),
    "bias_tanh": ("T x, T b", "out = tanh(x + b)"),
    "bias_relu": ("T x, T b", "out = max(x + b, (T)0)"),
}


def _gpu_float(array: Any) -> bool:
    cp = cupy_or_none()
    return cp is not None and isinstance(array, cp.ndarray) and array.dtype in (np.float32, np.float64)


def _fused(name: str, array: Any) -> Any:
    """The fused CuPy kernel ``name`` when ``array`` is a float32/float64 CuPy array, else
    None (NumPy, or float16, keeps the separate passes)."""
    if not _gpu_float(array):
        return None
    inputs, body = _FUSED[name]
    return elementwise(name, inputs, "T out", body)


def fuse_bias(layers: list[Layer]) -> int:
    """Let each sigmoid, tanh or relu Activation right after a FullyConnected layer with a
    bias add that bias in its own kernel (one pass and one launch fewer per layer). Only
    where the layer's parameters are float32/float64 CuPy arrays; returns how many pairs."""
    pairs = 0
    for dense, act in zip(layers, layers[1:]):
        if (isinstance(dense, FullyConnected) and dense.use_bias and type(act) is Activation
                and act.function in ("sigmoid", "tanh", "relu") and _gpu_float(dense.params["b"])
                and act.dtype == dense.params["b"].dtype):
            dense.bias_in_next, act.bias_from = True, dense
            pairs += 1
    return pairs


def _canonical(name: str | None) -> str:
    key = "identity" if name is None else _ALIASES.get(name.lower(), name.lower())
    if key not in ACTIVATIONS:
        raise ConfigError(f"unknown activation {name!r}: choose from {', '.join(ACTIVATIONS)}")
    return key


class Activation(Layer):
    """Apply ``function`` element-wise (softmax: across the last axis)."""

    saved_for_backward = ("_y",)
    graph_safe = True

    def __init__(self, function: str = "relu", name: str | None = None) -> None:
        super().__init__(name)
        self.function = _canonical(function)
        self.bias_from: FullyConnected | None = None  # whose bias this layer adds (fuse_bias)
        self._y: Any = None

    def build(self, input_shape: Shape) -> Shape:
        if self.function == "softmax" and len(input_shape) != 1:
            raise self.mismatch(f"softmax expects a flat input of features, got shape {input_shape}")
        return input_shape

    def forward(self, x: Any, training: bool = True) -> Any:
        xp, f = self.xp, self.function
        if f == "identity":
            self._y = x
            return x
        y = self.buffer("y", x.shape)
        if self.bias_from is not None:
            _fused(f"bias_{f}", x)(x, self.bias_from.params["b"], y)
            self._y = y
            return y
        kernel = _fused("sigmoid", x) if f == "sigmoid" else None
        if kernel is not None:
            kernel(x, y)
        elif f == "sigmoid":
            xp.multiply(x, 0.5, out=y)
            xp.tanh(y, out=y)
            y *= 0.5
            y += 0.5
        elif f == "relu":
            xp.maximum(x, 0, out=y)
        elif f == "tanh":
            xp.tanh(x, out=y)
        else:
            xp.subtract(x, x.max(axis=-1, keepdims=True), out=y)
            xp.exp(y, out=y)
            y /= y.sum(axis=-1, keepdims=True)
        self._y = y
        return y

    def backward(self, grad: Any, need_input_grad: bool = True) -> Any:
        if not need_input_grad:
            return None
        xp, f, y = self.xp, self.function, self._y
        if f == "identity":
            return grad
        dx = self.buffer("dx", grad.shape)
        kernel = _fused(f"{f}_grad", grad) if f in ("sigmoid", "tanh", "relu") else None
        if kernel is not None:
            kernel(grad, y, dx)
        elif f == "sigmoid":
            tmp = self.buffer("tmp", grad.shape)
            xp.subtract(1, y, out=tmp)
            tmp *= y
            xp.multiply(grad, tmp, out=dx)
        elif f == "relu":
            mask = self.buffer("mask", grad.shape, dtype=bool)
            xp.greater(y, 0, out=mask)
            xp.multiply(grad, mask, out=dx)
        elif f == "tanh":
            tmp = self.buffer("tmp", grad.shape)
            xp.multiply(y, y, out=tmp)
            xp.subtract(1, tmp, out=tmp)
            xp.multiply(grad, tmp, out=dx)
        else:
            xp.multiply(grad, y, out=dx)
            xp.subtract(grad, dx.sum(axis=-1, keepdims=True), out=dx)
            dx *= y
        return dx


class Output(Activation):
    """The network's last layer: applies the final activation (``softmax`` for classifiers,
    ``identity`` for regression). With a softmax Output and the cross-entropy loss, the
    model hands the loss the logits instead and skips this layer's backward (the fused
    softmax cross-entropy is exact and cannot overflow)."""

    def __init__(self, activation: str = "softmax", name: str | None = None) -> None:
        super().__init__(activation, name)
