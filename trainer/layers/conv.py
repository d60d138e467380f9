"""Conv2D and Pooling2D on NCHW batches, by im2col: windows become rows of a matrix.

The window view is made with ``as_strided`` (no copy) and copied once into the column
matrix, so a convolution is one GEMM; the backward pass scatters columns back with one
strided add per kernel offset (``kh * kw`` adds, not one per output pixel).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from trainer.errors import ConfigError
from trainer.layers.base import Layer, Shape

__all__ = ["Conv2D", "Pooling2D"]


def _pair(value: int | tuple[int, int], what: str) -> tuple[int, int]:
    pair = (value, value) if isinstance(value, int) else tuple(value)
    if len(pair) != 2 or min(pair) < 0:
        raise ConfigError(f"{what} must be an int or a pair of non-negative ints, got {value!r}")
    return int(pair[0]), int(pair[1])


def _out_size(size: int, k: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - k) // stride + 1


def _windows(xp: Any, x: Any, k: tuple[int, int], stride: tuple[int, int], out: tuple[int, int]) -> Any:
    """A (N, C, OH, OW, KH, KW) view of the padded input ``x`` (no copy)."""
    n, c = x.shape[:2]
    s_n, s_c, s_h, s_w = x.strides
    return xp.lib.stride_tricks.as_strided(
        x, shape=(n, c, out[0], out[1], k[0], k[1]),
        strides=(s_n, s_c, s_h * stride[0], s_w * stride[1], s_h, s_w))


def _pad(layer: Layer, x: Any, pad: tuple[int, int], value: float = 0.0) -> Any:
    """``x`` padded with ``value`` by ``pad`` on its two spatial axes, in a buffer of
    ``layer`` (``x`` itself without padding: the window view takes any strides)."""
    if pad == (0, 0):
        return x
    n, c, h, w = x.shape
    out = layer.buffer("padded", (n, c, h + 2 * pad[0], w + 2 * pad[1]), x.dtype)
    out[...] = value
    out[:, :, pad[0]:pad[0] + h, pad[1]:pad[1] + w] = x
    return out


def _col2im(layer: Layer, cols: Any, padded_shape: tuple[int, ...], k: tuple[int, int],
            stride: tuple[int, int], pad: tuple[int, int]) -> Any:
    """Sum (N, C, OH, OW, KH, KW) window gradients back into an (N, C, H, W) gradient
    (a view into a buffer of ``layer``)."""
    dx = layer.buffer("dx", padded_shape)
    dx[...] = 0
    oh, ow = cols.shape[2:4]
    for i in range(k[0]):
        for j in range(k[1]):
            dx[:, :, i:i + stride[0] * oh:stride[0], j:j + stride[1] * ow:stride[1]] += cols[:, :, :, :, i, j]
    h_end, w_end = padded_shape[2] - pad[0], padded_shape[3] - pad[1]
    return dx[:, :, pad[0]:h_end, pad[1]:w_end]


class Conv2D(Layer):
    """2-D convolution: ``filters`` kernels of ``kernel_size`` over (C, H, W) samples.

    Weights are (filters, C, KH, KW), initialised like PyTorch's Conv2d (uniform in
    ``±1/sqrt(C*KH*KW)``); ``stride`` and zero ``padding`` are ints or (h, w) pairs.
    """

    saved_for_backward = ("_cols",)
    graph_safe = True

    def __init__(self, filters: int, kernel_size: int | tuple[int, int] = 3,
                 stride: int | tuple[int, int] = 1, padding: int | tuple[int, int] = 0,
                 bias: bool = True, name: str | None = None) -> None:
        super().__init__(name)
        if filters <= 0:
            raise ConfigError(f"Conv2D filters must be positive, got {filters}")
        self.filters, self.use_bias = int(filters), bias
        self.kernel = _pair(kernel_size, "kernel_size")
        self.stride = _pair(stride, "stride")
        self.padding = _pair(padding, "padding")
        if min(self.kernel) < 1 or min(self.stride) < 1:
            raise ConfigError("Conv2D kernel_size and stride must be at least 1")
        self._cols: Any = None
        self._x_shape: tuple[int, ...] = ()

    def build(self, input_shape: Shape) -> Shape:
        if len(input_shape) != 3:
            raise self.mismatch(f"expects samples shaped (channels, height, width), got {input_shape}")
        c, h, w = input_shape
        oh = _out_size(h, self.kernel[0], self.stride[0], self.padding[0])
        ow = _out_size(w, self.kernel[1], self.stride[1], self.padding[1])
        if oh < 1 or ow < 1:
            raise self.mismatch(f"kernel {self.kernel} with padding {self.padding} does not fit "
                                f"input of {h}x{w}")
        fan_in = c * self.kernel[0] * self.kernel[1]
        bound = 1.0 / math.sqrt(fan_in)
        w_init = self.rng.uniform(-bound, bound, size=(self.filters, c, *self.kernel))
        self.params = {"W": self.xp.asarray(w_init, dtype=self.dtype)}
        if self.use_bias:
            b = self.rng.uniform(-bound, bound, size=(self.filters,))
            self.params["b"] = self.xp.asarray(b, dtype=self.dtype)
        return (self.filters, oh, ow)

    def forward(self, x: Any, training: bool = True) -> Any:
        xp = self.xp
        n = x.shape[0]
        _, oh, ow = self.output_shape
        self._x_shape = x.shape
        view = _windows(xp, _pad(self, x, self.padding), self.kernel, self.stride, (oh, ow))
        cols = self.buffer("cols", (n, oh, ow) + view.shape[1:2] + view.shape[4:])
        cols[...] = view.transpose(0, 2, 3, 1, 4, 5)
        self._cols = cols.reshape(n * oh * ow, -1)
        y = self.buffer("y", (n * oh * ow, self.filters))
        self.gemm(self._cols, self.params["W"].reshape(self.filters, -1).T, y)
        if self.use_bias:
            y += self.params["b"]
        return y.reshape(n, oh, ow, self.filters).transpose(0, 3, 1, 2)

    def backward(self, grad: Any, need_input_grad: bool = True) -> Any:
        n, f = grad.shape[:2]
        g = self.buffer("g", (n, grad.shape[2], grad.shape[3], f))
        g[...] = grad.transpose(0, 2, 3, 1)
        g2 = g.reshape(-1, f)
        self.gemm(g2.T, self._cols, self.grads["W"].reshape(f, -1))
        if self.use_bias:
            g2.sum(axis=0, out=self.grads["b"])
        if not need_input_grad:
            return None
        dcols = self.buffer("dcols", (g2.shape[0], self._cols.shape[1]))
        self.gemm(g2, self.params["W"].reshape(f, -1), dcols)
        c = self._x_shape[1]
        dcols = dcols.reshape(n, grad.shape[2], grad.shape[3], c, *self.kernel).transpose(0, 3, 1, 2, 4, 5)
        padded = (n, c, self._x_shape[2] + 2 * self.padding[0], self._x_shape[3] + 2 * self.padding[1])
        return _col2im(self, dcols, padded, self.kernel, self.stride, self.padding)


class Pooling2D(Layer):
    """Max or average pooling over ``pool_size`` windows (``stride`` defaults to the pool size).

    Padding pads with -inf for max (never chosen) and with zeros for average (counted in
    the mean, as PyTorch's ``count_include_pad=True``).
    """

    saved_for_backward = ("_arg",)
    graph_safe = True

    def __init__(self, pool_size: int | tuple[int, int] = 2, stride: int | tuple[int, int] | None = None,
                 padding: int | tuple[int, int] = 0, mode: str = "max", name: str | None = None) -> None:
        super().__init__(name)
        if mode not in ("max", "average", "avg"):
            raise ConfigError(f"Pooling2D mode must be 'max' or 'average', got {mode!r}")
        self.mode = "max" if mode == "max" else "average"
        self.pool = _pair(pool_size, "pool_size")
        self.stride = _pair(pool_size if stride is None else stride, "stride")
        self.padding = _pair(padding, "padding")
        if min(self.pool) < 1 or min(self.stride) < 1:
            raise ConfigError("Pooling2D pool_size and stride must be at least 1")
        self._arg: Any = None
        self._x_shape: tuple[int, ...] = ()

    def build(self, input_shape: Shape) -> Shape:
        if len(input_shape) != 3:
            raise self.mismatch(f"expects samples shaped (channels, height, width), got {input_shape}")
        c, h, w = input_shape
        if 2 * self.padding[0] > self.pool[0] or 2 * self.padding[1] > self.pool[1]:
            raise self.mismatch(f"padding {self.padding} must be at most half the pool size {self.pool}")
        oh = _out_size(h, self.pool[0], self.stride[0], self.padding[0])
        ow = _out_size(w, self.pool[1], self.stride[1], self.padding[1])
        if oh < 1 or ow < 1:
            raise self.mismatch(f"pool {self.pool} does not fit input of {h}x{w}")
        return (c, oh, ow)

    def forward(self, x: Any, training: bool = True) -> Any:
        xp = self.xp
        _, oh, ow = self.output_shape
        self._x_shape = x.shape
        fill = -xp.inf if self.mode == "max" else 0.0
        view = _windows(xp, _pad(self, x, self.padding, fill), self.pool, self.stride, (oh, ow))
        cols = self.buffer("cols", view.shape)
        cols[...] = view
        flat = cols.reshape(*view.shape[:4], -1)
        y = self.buffer("y", view.shape[:4])
        if self.mode == "average":
            return flat.mean(axis=-1, out=y)
        self._arg = flat.argmax(axis=-1, out=self.buffer("arg", view.shape[:4], np.intp))
        return flat.max(axis=-1, out=y)

    def backward(self, grad: Any, need_input_grad: bool = True) -> Any:
        if not need_input_grad:
            return None
        xp = self.xp
        k = self.pool[0] * self.pool[1]
        cols = self.buffer("dcols", (*grad.shape, k))
        if self.mode == "average":
            xp.divide(grad[..., None], k, out=cols)
        else:
            cols[...] = 0
            xp.put_along_axis(cols, self._arg[..., None], grad[..., None], axis=-1)
        cols = cols.reshape(*grad.shape, *self.pool)
        n, c, h, w = self._x_shape
        padded = (n, c, h + 2 * self.padding[0], w + 2 * self.padding[1])
        return _col2im(self, cols, padded, self.pool, self.stride, self.padding)
