"""One-kernel CuPy versions of elementwise steps (activations, optimizer updates).

Each NumPy-style operation on a GPU is a kernel launch; where a step is several of them
over the same elements, one ``cupy.ElementwiseKernel`` does it in one pass and one launch.
Kernels are compiled on first use and cached by name; nothing here imports CuPy unless a
kernel is asked for, and only callers holding CuPy arrays ask.
"""

from __future__ import annotations

from typing import Any

from trainer.backend import cupy_or_none

__all__ = ["elementwise"]

_kernels: dict[tuple[str, str, str, str], Any] = {}


def elementwise(name: str, in_params: str, out_params: str, body: str) -> Any:
    """The cached ``cupy.ElementwiseKernel`` ``diel_<name>`` (built on first use)."""
    key = (name, in_params, out_params, body)
    kernel = _kernels.get(key)
    if kernel is None:
        cp = cupy_or_none()
        if cp is None:
            raise RuntimeError(f"fused kernel {name!r} needs CuPy with a CUDA GPU")
        kernel = _kernels[key] = cp.ElementwiseKernel(in_params, out_params, body, f"diel_{name}")
    return kernel
