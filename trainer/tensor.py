"""Tensor: an n-dimensional array on a MemoryManager (MagmaDNN's Tensor<T>).

Layers work on plain ``xp`` arrays for speed; Tensor is the user-level handle that ties
an array to a memory type, so data can be put on the host, the GPU or both explicitly.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trainer.memory import MemoryManager, MemoryType

__all__ = ["Tensor"]


class Tensor:
    """``shape`` numbers of ``dtype`` in ``mem_type`` memory, optionally filled from ``data``."""

    def __init__(self, shape: tuple[int, ...], dtype: Any = np.float32,
                 mem_type: MemoryType | str = MemoryType.HOST, device_id: int = 0,
                 data: Any = None, memory: MemoryManager | None = None) -> None:
        self.memory = memory or MemoryManager(shape, dtype, mem_type, device_id)
        self.shape = tuple(shape)
        if data is not None:
            self.memory.copy_from(Tensor.wrap(np.asarray(data, dtype=self.memory.dtype)).memory)

    @classmethod
    def wrap(cls, array: np.ndarray) -> Tensor:
        """A HOST tensor holding a copy of the NumPy ``array``."""
        memory = MemoryManager(array.shape, array.dtype, MemoryType.HOST)
        memory.host[...] = array
        return cls(array.shape, array.dtype, memory=memory)

    @property
    def dtype(self) -> np.dtype:
        """Element type."""
        return self.memory.dtype

    @property
    def data(self) -> Any:
        """The array to compute with (NumPy for HOST, CuPy otherwise)."""
        return self.memory.array

    def numpy(self) -> np.ndarray:
        """A NumPy copy of the contents."""
        return self.memory.to_numpy()

    def get(self, index: tuple[int, ...]) -> Any:
        """One element."""
        return self.memory.get(index)

    def set(self, index: tuple[int, ...], value: Any) -> None:
        """Write one element."""
        self.memory.set(index, value)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.numpy()
        return out if dtype is None else out.astype(dtype)

    def __repr__(self) -> str:
        return f"Tensor(shape={self.shape}, dtype={self.dtype}, mem_type={self.memory.mem_type.name})"
