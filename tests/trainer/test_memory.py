"""MemoryManager: HOST on any machine; the MANAGED staleness logic through a NumPy-backed
fake device (so it runs without a GPU); the real CuPy types where a GPU exists."""

from __future__ import annotations

import numpy as np
import pytest

from trainer import MemoryManager, MemoryType, MemoryTypeError, Tensor
from trainer.backend import cupy_or_none
from trainer.memory import DeviceOps


class FakeOps(DeviceOps):
    """A 'device' made of NumPy arrays, counting transfers."""

    def __init__(self):
        self.transfers = []

    def empty(self, shape, dtype, device_id):
        return np.empty(shape, dtype)

    empty_managed = empty

    def to_device(self, src, dst, stream=None):
        self.transfers.append(("to_device", stream))
        dst[...] = src

    def to_host(self, src, dst, stream=None):
        self.transfers.append(("to_host", stream))
        dst[...] = src

    def prefetch(self, array, device_id, stream=None):
        self.transfers.append(("prefetch", stream))


def test_host_memory():
    m = MemoryManager((2, 3), np.float32, MemoryType.HOST)
    m.set((1, 2), 5.0)
    assert m.get((1, 2)) == 5.0 and m.array is m.host and m.stale is None
    with pytest.raises(MemoryTypeError, match="no device array"):
        _ = m.device
    with pytest.raises(MemoryTypeError, match="unknown memory type"):
        MemoryManager(3, mem_type="shared")


@pytest.mark.skipif(cupy_or_none() is not None, reason="CuPy and a GPU are present")
@pytest.mark.parametrize("kind", ["device", "managed", "cuda_managed"])
def test_gpu_types_need_cupy(kind):
    with pytest.raises(MemoryTypeError, match="need CuPy"):
        MemoryManager(4, mem_type=kind)


def test_managed_copies_only_when_stale():
    ops = FakeOps()
    m = MemoryManager(4, np.float64, MemoryType.MANAGED, ops=ops)
    assert m.sync() is False and ops.transfers == []
    m.host[:] = [1, 2, 3, 4]
    m.mark_host_modified()
    assert m.stale == "device"
    np.testing.assert_array_equal(m.device, [1, 2, 3, 4])
    assert ops.transfers == [("to_device", None)]
    _ = m.device, m.host  # both current: no copy
    assert len(ops.transfers) == 1
    m.device[0] = 10
    m.mark_device_modified()
    assert m.stale == "host" and m.get(0) == 10
    assert ops.transfers[-1] == ("to_host", None) and m.copies == 2
    m.set(1, 20)  # host write marks the device side stale
    m.prefetch(stream="s1")
    assert ops.transfers[-1] == ("to_device", "s1") and m.stale is None
    m.prefetch()
    assert m.copies == 3


def test_copy_from_between_all_types():
    ops = FakeOps()
    source = MemoryManager(3, np.float64, MemoryType.HOST)
    source.host[:] = [1, 2, 3]
    made = {t: MemoryManager(3, np.float64, t, ops=ops) for t in MemoryType}
    for dst in made.values():
        dst.copy_from(source)
        np.testing.assert_array_equal(dst.to_numpy(), [1, 2, 3])
    for src in made.values():
        for dst_type in MemoryType:
            dst = MemoryManager(3, np.float32, dst_type, ops=ops)
            dst.copy_from(src)
            np.testing.assert_array_equal(dst.to_numpy(), [1, 2, 3])
    with pytest.raises(MemoryTypeError, match="sizes differ"):
        source.copy_from(MemoryManager(4))
    made[MemoryType.CUDA_MANAGED].prefetch(stream="s")
    assert ops.transfers[-1] == ("prefetch", "s")


def test_tensor_wraps_memory():
    t = Tensor((2, 2), data=[[1, 2], [3, 4]])
    assert t.get((1, 0)) == 3 and np.asarray(t).sum() == 10 and "HOST" in repr(t)


def test_real_gpu_memory(device):
    if device == "cpu":
        pytest.skip("GPU memory types need a GPU")
    m = MemoryManager(5, np.float32, MemoryType.MANAGED)
    m.fill(2.0)
    assert float(m.device.sum()) == 10.0
    um = MemoryManager(5, np.float32, MemoryType.CUDA_MANAGED)
    um.copy_from(m)
    um.prefetch()
    np.testing.assert_array_equal(um.to_numpy(), np.full(5, 2.0))
