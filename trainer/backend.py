"""One array namespace ``xp``: NumPy on the CPU, CuPy on a GPU.

CuPy is imported lazily and only when a GPU is asked for (or ``auto`` probes for one), so
the whole trainer imports and runs without it. Code that works on arrays asks
``xp = get_array_module(x)`` instead of naming NumPy, and the same layer runs on both.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from trainer.errors import DeviceError

__all__ = ["Device", "get_device", "get_array_module", "cupy_or_none", "cupy_problem", "to_numpy"]

_cupy: ModuleType | None = None
_cupy_probed = False
_cupy_problem: str | None = None   # why CuPy is unusable, quoted when a GPU is required
_cupy_error: BaseException | None = None   # the exception behind it, chained to DeviceError


def cupy_or_none() -> ModuleType | None:
    """CuPy if it imports and sees at least one GPU, else None (probed once per process;
    the reason it is unusable is kept: :func:`cupy_problem`)."""
    global _cupy, _cupy_probed, _cupy_problem, _cupy_error
    if not _cupy_probed:
        _cupy_probed = True
        if os.environ.get("DIEL_TRAINER_NO_CUPY"):
            _cupy_problem = "DIEL_TRAINER_NO_CUPY is set"
            return None
        try:
            import cupy  # noqa: PLC0415 - optional, imported only when a GPU is wanted

            if cupy.cuda.runtime.getDeviceCount() > 0:
                _cupy = cupy
            else:
                _cupy_problem = "CuPy sees no CUDA GPU"
        except Exception as e:  # CuPy missing, or installed without a driver/GPU
            _cupy, _cupy_problem, _cupy_error = None, f"{type(e).__name__}: {e}", e
    return _cupy


def cupy_problem() -> str | None:
    """Why CuPy cannot be used here (its import error, no GPU, or the opt-out variable),
    None when it can."""
    cupy_or_none()
    return _cupy_problem


def get_array_module(*arrays: Any) -> ModuleType:
    """``cupy`` if any argument is a CuPy array, else ``numpy`` (never imports CuPy itself)."""
    if _cupy is not None:
        return _cupy.get_array_module(*arrays)
    return np


def to_numpy(x: Any) -> np.ndarray:
    """A NumPy copy/view of ``x`` wherever it lives (CuPy arrays are copied to the host)."""
    if _cupy is not None and isinstance(x, _cupy.ndarray):
        return _cupy.asnumpy(x)
    return np.asarray(x)


@dataclass(frozen=True)
class Device:
    """Where a model lives: ``kind`` is ``"cpu"`` or ``"gpu"``, ``index`` the GPU number.

    ``xp`` is the array module for that place.
    """

    kind: str
    index: int = 0

    @property
    def xp(self) -> ModuleType:
        """The array module: numpy for the CPU, cupy for a GPU."""
        return np if self.kind == "cpu" else _require_cupy()

    @property
    def is_gpu(self) -> bool:
        """True for a GPU device."""
        return self.kind == "gpu"

    def activate(self) -> None:
        """Make this the current CUDA device (no-op on the CPU)."""
        if self.is_gpu:
            _require_cupy().cuda.Device(self.index).use()

    def __str__(self) -> str:
        return "cpu" if self.kind == "cpu" else f"gpu:{self.index}"


def _require_cupy() -> ModuleType:
    cp = cupy_or_none()
    if cp is None:
        raise DeviceError(f"a GPU device needs CuPy and a CUDA GPU ({_cupy_problem}); install "
                          "with pip install 'diel[gpu]' (CUDA 12) or 'diel[gpu-cuda13]' "
                          "(CUDA 13), or use device='cpu'") from _cupy_error
    return cp


_SPEC = re.compile(r"^(cpu|gpu|cuda|auto)(?::(\d+))?$")


def get_device(spec: str | Device | None = "auto") -> Device:
    """Parse a device setting: ``cpu``, ``gpu``, ``gpu:N`` (``cuda`` is an alias) or ``auto``.

    ``auto`` (and None) picks GPU 0 when CuPy sees one, else the CPU. Asking for a GPU on a
    machine without CuPy or without that GPU raises :class:`DeviceError`.
    """
    if isinstance(spec, Device):
        return spec
    text = "auto" if spec is None else str(spec).strip().lower()
    match = _SPEC.match(text)
    if match is None:
        raise DeviceError(f"unknown device {spec!r}: use 'cpu', 'gpu', 'gpu:N' or 'auto'")
    kind, index = match.group(1), int(match.group(2) or 0)
    if kind == "auto":
        return Device("gpu", 0) if cupy_or_none() is not None else Device("cpu")
    if kind == "cpu":
        return Device("cpu")
    cp = _require_cupy()
    count = cp.cuda.runtime.getDeviceCount()
    if index >= count:
        raise DeviceError(f"device {spec!r}: this machine has {count} GPU(s) (0..{count - 1})")
    return Device("gpu", index)
