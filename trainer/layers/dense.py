"""Input, FullyConnected, Flatten and Dropout layers."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from trainer.errors import ConfigError
from trainer.layers.base import Layer, Shape

__all__ = ["Input", "FullyConnected", "Flatten", "Dropout"]


class Input(Layer):
    """The first layer: fixes the per-sample input shape (e.g. ``(784,)`` or ``(1, 28, 28)``)."""

    graph_safe = True

    def __init__(self, shape: int | tuple[int, ...], name: str | None = None) -> None:
        super().__init__(name)
        self.shape: Shape = (shape,) if isinstance(shape, int) else tuple(int(s) for s in shape)
        if not self.shape or min(self.shape) <= 0:
            raise ConfigError(f"Input shape must be non-empty and positive, got {shape!r}")

    def build(self, input_shape: Shape) -> Shape:
        if input_shape and input_shape != self.shape:
            raise self.mismatch(f"expects samples of shape {self.shape}, got {input_shape}")
        return self.shape

    def forward(self, x: Any, training: bool = True) -> Any:
        return x

    def backward(self, grad: Any, need_input_grad: bool = True) -> Any:
        return grad if need_input_grad else None


class FullyConnected(Layer):
    """``y = x @ W + b`` with ``W`` of shape (in_features, units).

    ``in_features`` is optional; when given it is checked against the previous layer.
    Weights and bias start uniform in ``±1/sqrt(in_features)`` (PyTorch's Linear default),
    so results are comparable with PyTorch runs of the same network.
    """

    saved_for_backward = ("_x",)
    graph_safe = True

    def __init__(self, units: int, in_features: int | None = None, bias: bool = True,
                 name: str | None = None) -> None:
        super().__init__(name)
        if units <= 0:
            raise ConfigError(f"FullyConnected units must be positive, got {units}")
        self.units, self.in_features, self.use_bias = int(units), in_features, bias
        self.bias_in_next = False  # the next layer (a fused GPU activation) adds the bias
        self._x: Any = None

    def build(self, input_shape: Shape) -> Shape:
        if len(input_shape) != 1:
            raise self.mismatch(f"expects a flat input of features, got shape {input_shape} "
                                "(add a Flatten layer before it)")
        n_in = input_shape[0]
        if self.in_features is not None and self.in_features != n_in:
            raise self.mismatch(f"expects input of {self.in_features} features, got {n_in}")
        bound = 1.0 / math.sqrt(n_in)
        w = self.rng.uniform(-bound, bound, size=(n_in, self.units))
        self.params = {"W": self.xp.asarray(w, dtype=self.dtype)}
        if self.use_bias:
            b = self.rng.uniform(-bound, bound, size=(self.units,))
            self.params["b"] = self.xp.asarray(b, dtype=self.dtype)
        return (self.units,)

    def forward(self, x: Any, training: bool = True) -> Any:
        self._x = x
        y = self.buffer("y", (x.shape[0], self.units))
        self.gemm(x, self.params["W"], y)
        if self.use_bias and not self.bias_in_next:
            y += self.params["b"]
        return y

    def backward(self, grad: Any, need_input_grad: bool = True) -> Any:
        self.gemm(self._x.T, grad, self.grads["W"])
        if self.use_bias:
            grad.sum(axis=0, out=self.grads["b"])
        if not need_input_grad:
            return None
        dx = self.buffer("dx", self._x.shape)
        self.gemm(grad, self.params["W"].T, dx)
        return dx


class Flatten(Layer):
    """Reshape each sample to one axis of features (a view, no copy)."""

    graph_safe = True

    def build(self, input_shape: Shape) -> Shape:
        return (int(np.prod(input_shape)),)

    def forward(self, x: Any, training: bool = True) -> Any:
        return x.reshape(x.shape[0], -1)

    def backward(self, grad: Any, need_input_grad: bool = True) -> Any:
        return grad.reshape(grad.shape[0], *self.input_shape) if need_input_grad else None


class Dropout(Layer):
    """Zero a fraction ``rate`` of inputs while training and scale the rest by 1/(1-rate)
    (inverted dropout, so evaluation is the identity)."""

    saved_for_backward = ("_mask",)

    @property
    def graph_safe(self) -> bool:
        """Only without dropping: the masks are drawn on the host, a new one each step."""
        return self.rate == 0.0

    def __init__(self, rate: float = 0.5, name: str | None = None) -> None:
        super().__init__(name)
        if not 0.0 <= rate < 1.0:
            raise ConfigError(f"Dropout rate must be in [0, 1), got {rate}")
        self.rate = float(rate)
        self._mask: Any = None

    def forward(self, x: Any, training: bool = True) -> Any:
        if not training or self.rate == 0.0:
            self._mask = None
            return x
        xp = self.xp
        draw = self.staged("draw", x.shape, np.float64)
        self.rng.random(out=draw.host)  # host RNG: the same masks for a seed on any device
        draw.mark_host_modified()
        mask = self.buffer("mask", x.shape)
        xp.greater_equal(draw.array, self.rate, out=mask)
        mask *= 1.0 / (1.0 - self.rate)
        y = self.buffer("y", x.shape)
        xp.multiply(x, mask, out=y)
        self._mask = mask
        return y

    def backward(self, grad: Any, need_input_grad: bool = True) -> Any:
        if not need_input_grad:
            return None
        if self._mask is None:
            return grad
        dx = self.buffer("dx", grad.shape)
        self.xp.multiply(grad, self._mask, out=dx)
        return dx
