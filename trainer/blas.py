"""Matrix products on a GPU through cuBLAS itself, callable while a CUDA graph is captured.

CuPy refuses every cuBLAS call while a stream is capturing (its ``cublas.setStream``
raises NotImplementedError), although cuBLAS supports capture. So a GPU layer multiplies
through :func:`matmul`: for float32/float64 CuPy operands whose layout cuBLAS takes
(row-major, or transposed views of it) it calls ``cublas<S|D>gemm_v2`` of the cuBLAS
library CuPy loaded, by ctypes, on this module's own handle (its stream set to the
current one, with a fixed workspace so a capture allocates nothing); anything else goes
to ``xp.matmul``, as on the CPU. It is also cheaper per call than CuPy's matmul, which
matters at batch 100, where a product is a few microseconds of GPU work.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np

from trainer.backend import cupy_or_none

__all__ = ["matmul", "cublas_problem"]

_OP_N, _OP_T = 0, 1
_WORKSPACE_BYTES = 32 * 2 ** 20  # cuBLAS's recommended workspace on Hopper


class _Cublas:
    """A cuBLAS handle of the library CuPy loaded, for the current device and thread, its
    stream and workspace kept current."""

    def __init__(self, cp: Any) -> None:
        self.cp = cp
        self.lib = ctypes.CDLL(_loaded_cublas(cp))
        handle = ctypes.c_void_p()
        self._check(self.lib.cublasCreate_v2(ctypes.byref(handle)), "cublasCreate")
        self.handle = handle
        self.workspace = cp.empty(_WORKSPACE_BYTES, dtype=np.uint8)
        self.stream: int | None = None
        self.gemm = {np.dtype(np.float32): (self.lib.cublasSgemm_v2, ctypes.c_float),
                     np.dtype(np.float64): (self.lib.cublasDgemm_v2, ctypes.c_double)}

    @staticmethod
    def _check(status: int, what: str) -> None:
        if status != 0:
            raise RuntimeError(f"{what} failed with cuBLAS status {status}")

    def use_current_stream(self) -> None:
        stream = self.cp.cuda.get_current_stream().ptr
        if stream != self.stream:  # setting the stream resets the workspace: set both
            self._check(self.lib.cublasSetStream_v2(self.handle, ctypes.c_void_p(stream)), "cublasSetStream")
            self._check(self.lib.cublasSetWorkspace_v2(self.handle, ctypes.c_void_p(self.workspace.data.ptr),
                                                       ctypes.c_size_t(_WORKSPACE_BYTES)), "cublasSetWorkspace")
            self.stream = stream

    def product(self, a: Any, b: Any, out: Any) -> bool:
        """``out[...] = a @ b`` when cuBLAS can take the operands as they lie; False if not."""
        routine = self.gemm.get(out.dtype)
        layout_a, layout_b = _layout(a), _layout(b)
        if (routine is None or layout_a is None or layout_b is None or a.dtype != out.dtype
                or b.dtype != out.dtype or not out.flags.c_contiguous):
            return False
        m, k = a.shape
        n = b.shape[1]
        if m == 0 or n == 0:
            return True
        if k == 0:
            out[...] = 0
            return True
        self.use_current_stream()
        function, scalar = routine
        alpha, beta = scalar(1.0), scalar(0.0)
        # row-major C = A @ B is column-major C^T = B^T @ A^T: B first, then A
        self._check(function(self.handle, layout_b[0], layout_a[0], n, m, k, ctypes.byref(alpha),
                             ctypes.c_void_p(b.data.ptr), layout_b[1], ctypes.c_void_p(a.data.ptr), layout_a[1],
                             ctypes.byref(beta), ctypes.c_void_p(out.data.ptr), n), "gemm")
        return True


def _layout(x: Any) -> tuple[int, int] | None:
    """(operation, leading dimension) that gives cuBLAS the column-major transpose of the
    2-D array ``x``: row-major ``x`` as it lies, a transposed view of one through ``T``;
    None for any other layout."""
    if x.ndim != 2:
        return None
    rows, cols = x.shape
    s0, s1 = (s // x.itemsize for s in x.strides)
    if x.flags.c_contiguous:
        return _OP_N, max(cols, 1)
    if x.flags.f_contiguous:
        return _OP_T, max(rows, 1)
    if s1 == 1 and s0 >= cols:
        return _OP_N, s0
    if s0 == 1 and s1 >= rows:
        return _OP_T, s1
    return None


def _loaded_cublas(cp: Any) -> str:
    """The path of the cuBLAS library CuPy has loaded (read from /proc/self/maps)."""
    cp.cuda.device.get_cublas_handle()  # makes CuPy load it
    with open("/proc/self/maps", encoding="utf-8") as maps:
        for line in maps:
            path = line.split()[-1]
            name = path.rsplit("/", 1)[-1]
            if name.startswith("libcublas.so"):
                return path
    raise OSError("CuPy has not loaded libcublas")


_handles = threading.local()  # device id -> _Cublas, per thread (a handle is not shared)
_problem: str | None = None


def cublas_problem() -> str | None:
    """Why :func:`matmul` cannot call cuBLAS directly here (None when it can)."""
    _get()
    return _problem


def _get() -> _Cublas | None:
    global _problem
    cp = cupy_or_none()
    if cp is None or _problem is not None:
        _problem = _problem or "no CuPy"
        return None
    mine = _handles.__dict__.setdefault("by_device", {})
    device = cp.cuda.Device().id
    if device not in mine:
        try:
            mine[device] = _Cublas(cp)
        except (OSError, AttributeError, RuntimeError) as e:
            _problem = f"{type(e).__name__}: {e}"
            return None
    return mine[device]


def matmul(xp: Any, a: Any, b: Any, out: Any) -> Any:
    """``out[...] = a @ b`` for 2-D ``a``, ``b``: cuBLAS directly for CuPy arrays it can
    take (capturable), else ``xp.matmul`` (NumPy on the CPU, unchanged)."""
    if xp is not np:
        blas = _get()
        if blas is not None and blas.product(a, b, out):
            return out
    return xp.matmul(a, b, out=out)
