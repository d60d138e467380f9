"""Data parallelism for one copy of the trainer: every rank computes a slice of each global
batch (:mod:`trainer.slicing`), and the gradients are summed with ONE Allreduce per step
over one flat buffer.

* :func:`fuse` lays a list of arrays out as views into one contiguous buffer, so the
  layers write their gradients straight into the buffer that is reduced (no packing copy).
  Two extra slots at its end carry the step's loss sum and correct count, so the same
  single call also agrees the loss on every rank (divergence is then seen by all ranks at
  the same step and none is left waiting in a collective).
* :class:`GradientReducer` does the Allreduce in place: NCCL for CuPy arrays when
  ``cupy.cuda.nccl`` works and every rank of the copy has its own GPU; CUDA-aware MPI when
  the MPI library says it is (``MPIX_Query_cuda_support``, or ``DIEL_CUDA_AWARE_MPI=1``);
  otherwise the buffer is staged through pinned host memory. NumPy buffers go to MPI as is.
"""

from __future__ import annotations

import ctypes
import os
import socket
import time
from typing import Any, Callable, Sequence

import numpy as np

from trainer.backend import cupy_or_none

__all__ = ["fuse", "GradientReducer", "cuda_aware_mpi", "EXTRA_SLOTS"]

#: Slots after the gradients in a reduced buffer: the step's loss sum and correct count.
EXTRA_SLOTS = 2


def fuse(arrays: Sequence[Any], zeros: Callable[[int, Any], Any], dtype: Any,
         extra: int = 0) -> tuple[Any, list[Any]]:
    """``(flat, views)``: one buffer of ``sum(sizes) + extra`` elements from ``zeros(size,
    dtype)`` (the model's allocator; ``numpy.zeros`` will do) and, for each array, a view
    into it of the same shape holding a copy of its values."""
    total = sum(int(a.size) for a in arrays)
    flat = zeros(total + extra, dtype)
    views, offset = [], 0
    for a in arrays:
        view = flat[offset:offset + a.size].reshape(a.shape)
        view[...] = a
        views.append(view)
        offset += a.size
    return flat, views


def cuda_aware_mpi() -> bool:
    """Whether the MPI library can read and write GPU memory: ``DIEL_CUDA_AWARE_MPI`` (0/1)
    decides when set, else ``MPIX_Query_cuda_support()`` of the loaded libmpi (Open MPI,
    MPICH >= 4 built with CUDA); False when neither says so (e.g. the PyPI MPICH wheel)."""
    setting = os.environ.get("DIEL_CUDA_AWARE_MPI")
    if setting is not None:
        return setting.strip().lower() in ("1", "true", "yes")
    for path in _loaded_mpi_libraries():
        try:
            query = getattr(ctypes.CDLL(path), "MPIX_Query_cuda_support")
        except (OSError, AttributeError):
            continue
        query.restype = ctypes.c_int
        return bool(query())
    return False


def _loaded_mpi_libraries() -> list[str]:
    """Paths of the libmpi* shared objects this process has loaded (Linux /proc/self/maps)."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            paths = {line.split()[-1] for line in maps if "libmpi" in line and "/" in line}
    except OSError:
        return []
    return sorted(paths)


class GradientReducer:
    """Sums ``buffer`` in place over ``comm`` with one collective per :meth:`allreduce`.

    ``transport`` says which path was chosen: ``mpi`` (host arrays), ``nccl``,
    ``cuda-aware-mpi`` or ``host-staging`` (GPU arrays); ``seconds`` and ``calls`` add up
    the time spent in the collective (for the Allreduce share of a step; on the GPU the
    NCCL time is only the enqueue unless the caller synchronises, and the MPI paths'
    includes waiting for the gradients).

    A GPU buffer is reduced in the order of CuPy's current stream (the CUDA graphs' stream
    during a graphed fit): after the work already enqueued on it, which wrote the
    gradients, and before the work enqueued after, which reads the sums. NCCL enqueues on
    that stream; the MPI paths first wait for it, and host staging copies back on it.
    """

    def __init__(self, comm: Any, buffer: Any, is_gpu: bool) -> None:
        from mpi4py import MPI  # noqa: PLC0415 - only data-parallel runs need MPI

        self.comm, self.buffer, self._mpi = comm, buffer, MPI
        self.seconds, self.calls = 0.0, 0
        self._nccl: Any = None
        self._host: Any = None
        if not is_gpu:
            self.transport = "mpi"
        elif self._start_nccl():
            self.transport = "nccl"
        elif cuda_aware_mpi():
            self.transport = "cuda-aware-mpi"
        else:
            self.transport = "host-staging"
            self._host = _pinned_like(buffer)

    def allreduce(self) -> None:
        """Replace ``buffer`` on every rank by its sum over the ranks."""
        start = time.perf_counter()
        buf, in_place, total = self.buffer, self._mpi.IN_PLACE, self._mpi.SUM
        if self.transport == "mpi":
            self.comm.Allreduce(in_place, buf, op=total)
        elif self.transport == "nccl":
            self._nccl_allreduce()
        elif self.transport == "cuda-aware-mpi":
            _cupy().cuda.get_current_stream().synchronize()  # MPI does not know CuPy's stream
            self.comm.Allreduce(in_place, buf, op=total)
        else:
            stream = _cupy().cuda.get_current_stream()
            buf.get(stream=stream, out=self._host, blocking=True)  # waits for the gradients
            self.comm.Allreduce(in_place, self._host, op=total)
            buf.set(self._host, stream=stream)  # before what the stream does next
        self.seconds += time.perf_counter() - start
        self.calls += 1

    def _start_nccl(self) -> bool:
        """Create an NCCL communicator when NCCL is importable and no two ranks of the copy
        share a GPU (NCCL refuses that); every rank takes the same decision."""
        cp = _cupy()
        try:
            from cupy.cuda import nccl  # noqa: PLC0415 - optional
            usable = bool(getattr(nccl, "available", True))
        except Exception:  # CuPy built without NCCL
            usable = False
        where = (socket.gethostname(), cp.cuda.Device().id)
        places = self.comm.allgather(where)
        if not all(self.comm.allgather(usable)) or len(set(places)) < len(places):
            return False
        uid = self.comm.bcast(nccl.get_unique_id() if self.comm.Get_rank() == 0 else None, root=0)
        self._nccl = nccl.NcclCommunicator(self.comm.Get_size(), uid, self.comm.Get_rank())
        return True

    def _nccl_allreduce(self) -> None:
        from cupy.cuda import nccl  # noqa: PLC0415 - optional

        kinds = {"float16": nccl.NCCL_FLOAT16, "float32": nccl.NCCL_FLOAT32, "float64": nccl.NCCL_FLOAT64}
        buf = self.buffer
        stream = _cupy().cuda.get_current_stream().ptr
        self._nccl.allReduce(buf.data.ptr, buf.data.ptr, buf.size, kinds[buf.dtype.name], nccl.NCCL_SUM, stream)


def _cupy() -> Any:
    return cupy_or_none()


def _pinned_like(array: Any) -> np.ndarray:
    """A NumPy array in page-locked host memory shaped like the CuPy ``array``."""
    cp = _cupy()
    memory = cp.cuda.alloc_pinned_memory(array.nbytes)
    return np.frombuffer(memory, array.dtype, array.size).reshape(array.shape)
