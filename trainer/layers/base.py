"""The Layer contract: what every layer (built-in or custom) provides to the model.

A layer is built once with the per-sample input shape and returns its per-sample output
shape; a shape it cannot take raises :class:`ShapeMismatchError` through :meth:`mismatch`,
which the model prefixes with the layer's position and name. Forward and backward work on
whole batches. To keep the training loop free of allocation, layers write into buffers
from :meth:`buffer`, cached by shape, so a steady batch size reuses the same memory; a
returned array is only valid until the layer's next call. The buffers come from the
model's :class:`~trainer.allocator.Allocator` (``self.memory``), so they live in the
memory type the model was given.

A custom layer subclasses :class:`Layer` and overrides ``build`` (optional), ``forward``
and ``backward``; parameters go in ``self.params`` and their gradients, same keys, in
``self.grads``. A layer whose passes are device operations on its own buffers alone (no
host random numbers, no host copies, no Python decisions on array values) sets
``graph_safe``, so a GPU model may capture its step as a CUDA graph (:mod:`trainer.graph`).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from trainer.allocator import Allocator, BufferCache
from trainer.blas import matmul
from trainer.errors import ShapeMismatchError

__all__ = ["Layer", "Shape"]

Shape = tuple[int, ...]


class Layer(BufferCache):
    """Base class: a named step with optional parameters, a forward and a backward pass."""

    #: Attributes holding arrays that ``backward`` needs from ``forward`` (host offload
    #: moves them to the host in between; see trainer.offload).
    saved_for_backward: tuple[str, ...] = ()
    #: True when forward and backward may be captured into a CUDA graph and replayed (see
    #: the module's docstring); False for a custom layer unless it says so.
    graph_safe = False

    def __init__(self, name: str | None = None) -> None:
        self.name = name
        self.params: dict[str, Any] = {}
        self.grads: dict[str, Any] = {}
        self.input_shape: Shape = ()
        self.output_shape: Shape = ()
        self.xp: ModuleType = np
        self.dtype: np.dtype = np.dtype(np.float32)
        self.rng: Any = None
        self.gemm_dtype: np.dtype | None = None
        self.memory: Allocator | None = None
        self.cache_buffers = True  # False while offloading, so saved arrays can be freed

    # -- building -------------------------------------------------------------------------
    def setup(self, input_shape: Shape, xp: ModuleType, dtype: np.dtype, rng: Any,
              gemm_dtype: np.dtype | None = None, memory: Allocator | None = None) -> Shape:
        """Called by the model: record the context, build, and return the output shape.

        ``rng`` is a NumPy Generator (initialisation and dropout draw from it, so a seed
        reproduces a run on any device); ``gemm_dtype`` (float16 when asked for) is the
        precision :meth:`gemm` multiplies in, None for the layer's own dtype; ``memory``
        makes the layer's arrays (the plain allocator for ``xp`` when None)."""
        self.xp, self.dtype, self.rng = xp, np.dtype(dtype), rng
        self.memory = memory or Allocator.for_arrays(xp)
        self.gemm_dtype = None if gemm_dtype is None or np.dtype(gemm_dtype) == self.dtype else np.dtype(gemm_dtype)
        self.input_shape = tuple(input_shape)
        self.clear_buffers()
        self.output_shape = tuple(self.build(self.input_shape))
        self.grads = {k: self.memory.zeros(v.shape, v.dtype, "grad") for k, v in self.params.items()}
        return self.output_shape

    def build(self, input_shape: Shape) -> Shape:
        """Create parameters for this input shape and return the output shape (default: same)."""
        return input_shape

    def mismatch(self, message: str) -> ShapeMismatchError:
        """A shape error for this layer; the model adds the layer's position and name."""
        return ShapeMismatchError(message)

    # -- running --------------------------------------------------------------------------
    def forward(self, x: Any, training: bool = True) -> Any:
        """The layer's output for batch ``x`` (keep what backward needs)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement forward")

    def backward(self, grad: Any, need_input_grad: bool = True) -> Any:
        """Fill ``self.grads`` from ``grad`` (d loss / d output) and return d loss / d input,
        or None when ``need_input_grad`` is False (the first layer skips that work)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement backward")

    def gemm(self, a: Any, b: Any, out: Any) -> Any:
        """``out[...] = a @ b``, in ``gemm_dtype`` when set (inputs cast into buffers, the
        product cast back into ``out``; the buffers are used up before the next call). On a
        GPU through cuBLAS directly where it can (:mod:`trainer.blas`)."""
        if self.gemm_dtype is None:
            return matmul(self.xp, a, b, out)
        low = self.gemm_dtype
        a_low, b_low = self.buffer("gemm.a", a.shape, low), self.buffer("gemm.b", b.shape, low)
        a_low[...], b_low[...] = a, b
        out_low = self.buffer("gemm.out", out.shape, low)
        matmul(self.xp, a_low, b_low, out_low)
        out[...] = out_low
        return out

    def describe(self) -> str:
        """``Kind 'name'`` (or just ``Kind``) for messages and summaries."""
        kind = type(self).__name__
        return f"{kind} {self.name!r}" if self.name else kind

    def __repr__(self) -> str:
        return f"<{self.describe()} {self.input_shape}->{self.output_shape}>"
