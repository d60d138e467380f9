"""MemoryManager: HOST on any machine; the MANAGED staleness logic and the CUDA_MANAGED host
view through a NumPy-backed fake device (so they run without a GPU); the real CuPy types
where a GPU exists."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.fake_gpu import FakeOps
from trainer import MemoryManager, MemoryType, MemoryTypeError
from trainer.backend import cupy_or_none

CUDA_DEVICE_MEMORY, CUDA_MANAGED_MEMORY = 2, 3  # cudaMemoryType, as cudaPointerGetAttributes reports it


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


def test_cuda_managed_memory_is_read_and_written_from_the_host():
    ops = FakeOps()
    m = MemoryManager((2, 3), np.float32, MemoryType.CUDA_MANAGED, ops=ops)
    m.host[1, 2] = 7.0  # the host writes the unified memory itself: nothing to copy or mark
    assert m.device[1, 2] == 7.0 and m.stale is None and m.copies == 0
    m.device[0, 0] = 3.0
    assert m.host[0, 0] == 3.0 and ops.transfers.count(("host_view", None)) == 2
    np.testing.assert_array_equal(m.to_numpy(), m.device)


@pytest.mark.parametrize("kind", list(MemoryType))
def test_load_fills_every_type_from_the_host(kind):
    m = MemoryManager((2, 2), np.float32, kind, ops=FakeOps())
    m.load(np.arange(4.0).reshape(2, 2))
    # MANAGED: written on the host side, copied when the device side is read
    assert m.stale == ("device" if kind is MemoryType.MANAGED else None)
    np.testing.assert_array_equal(m.array, [[0, 1], [2, 3]])
    assert m.array.dtype == np.float32 and m.stale is None


class GarbageOps(FakeOps):
    """A fake device whose fresh memory holds 7s, as a real device's holds what was there
    before: what reads 0 was zeroed."""

    def empty(self, shape, dtype, device_id):
        array = super().empty(shape, dtype, device_id)
        array.fill(7)
        return array

    empty_managed = empty


@pytest.mark.parametrize("kind", [MemoryType.DEVICE, MemoryType.MANAGED, MemoryType.CUDA_MANAGED])
def test_no_zeroing_when_asked(kind):
    left = MemoryManager(3, np.float64, kind, ops=GarbageOps(), zeroed=False)
    assert left.device.tolist() == [7.0, 7.0, 7.0]  # not written: no zeroing kernel
    zeroed = MemoryManager(3, np.float64, kind, ops=GarbageOps())
    assert zeroed.device.tolist() == [0.0, 0.0, 0.0]


@pytest.mark.gpu
@pytest.mark.skipif(cupy_or_none() is None, reason="CuPy with a CUDA GPU is not available")
def test_real_gpu_memory():
    cp = cupy_or_none()
    m = MemoryManager(5, np.float32, MemoryType.MANAGED)
    m.fill(2.0)
    assert float(m.device.sum()) == 10.0
    um = MemoryManager(5, np.float32, MemoryType.CUDA_MANAGED)
    um.copy_from(m)
    um.prefetch()
    np.testing.assert_array_equal(um.to_numpy(), np.full(5, 2.0))
    attributes = cp.cuda.runtime.pointerGetAttributes(um.device.data.ptr)
    assert attributes.type == CUDA_MANAGED_MEMORY
    copies = um.copies
    um.device[...] *= 3  # a kernel writes it; the host view waits for it and reads the same memory
    view = um.host
    np.testing.assert_array_equal(view, np.full(5, 6.0))
    view[0] = -1.0  # and the host writes it in place
    assert float(um.device[0]) == -1.0 and um.copies == copies  # no copy either way
