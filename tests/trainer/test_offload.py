"""Host offload: gradients and weights unchanged whether saved activations stay or travel,
and a copy out never reads memory that was already given back."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from tests.helpers.fake_gpu import DeviceArray, FakeCupy, FakeOps
from trainer import (SGD, Activation, Allocator, Conv2D, Dropout, Flatten, FullyConnected, Input, MemoryType,
                     NeuralNetwork, Output, Pooling2D, synthetic)
from trainer.backend import cupy_or_none
from trainer.offload import CupyOffloadOps, NumpyOffloadOps, Offloader, Swapped


def _layers():
    return [Input((1, 6, 6)), Conv2D(2, 3, padding=1), Activation("relu"), Pooling2D(2), Flatten(),
            FullyConnected(10), Activation("tanh"), Dropout(0.2), FullyConnected(3), Output("softmax")]


def _train(device, offload, simulate=False):
    x, y = synthetic(60, (1, 6, 6), classes=3, seed=0)
    model = NeuralNetwork(_layers(), "cross_entropy", SGD(0.1, momentum=0.5),
                          {"device": device, "dtype": "float64", "offload": offload, "seed": 1})
    if simulate:  # the GPU's swapping bookkeeping, with plain host copies
        model._offloader = Offloader(model._train_layers, NumpyOffloadOps())
        for layer in model.layers:
            layer.cache_buffers = False
    model.fit(x, y, epochs=2, batch_size=20)
    return model


def test_offload_is_a_no_op_on_the_cpu():
    model = _train("cpu", True)
    assert model._offloader is None
    np.testing.assert_array_equal(model.updater.flat_params, _train("cpu", False).updater.flat_params)


def test_swapping_saved_arrays_out_and_back_leaves_training_unchanged():
    model = _train("cpu", True, simulate=True)
    assert model._offloader.swapped_out >= 6 * 5  # 6 steps, several layers each
    np.testing.assert_array_equal(model.updater.flat_params, _train("cpu", False).updater.flat_params)


@pytest.mark.gpu
def test_offload_on_the_gpu_gives_the_same_weights():
    if cupy_or_none() is None:
        pytest.skip("CuPy with a CUDA GPU is not available")
    np.testing.assert_allclose(_train("gpu", True).updater.flat_params.get(), _train("gpu", False).updater.flat_params.get(),
                               rtol=1e-12)


class Saves:
    """A layer stand-in holding one array for its backward pass."""

    saved_for_backward = ("_x",)

    def __init__(self, array=None):
        self._x = array


def test_the_contiguous_temporary_of_a_strided_array_lives_until_its_copy_cannot_be_overtaken():
    cupy = FakeCupy()
    compute = cupy.cuda.get_current_stream()
    memory = Allocator(MemoryType.DEVICE, ops=FakeOps(DeviceArray))
    ops = CupyOffloadOps(cupy, memory)
    source = memory.empty((4, 6), np.float32, "activation")
    source[...] = np.arange(24).reshape(4, 6)
    layers = [Saves(source.T), Saves(), Saves(), Saves()]  # a transposed view: not contiguous
    offloader = Offloader(layers, ops)
    offloader.after_forward(1)  # layer 1 ran forward: layer 0's saved array starts its copy out
    handle = layers[0]._x
    assert isinstance(handle, Swapped) and offloader.swapped_out == 1
    temporary = weakref.ref(handle.source)
    assert handle.source.flags.c_contiguous and cupy.copies[-1][1] == handle.source.data.ptr  # it reads that
    np.testing.assert_array_equal(handle.host, np.arange(24).reshape(4, 6).T)
    assert memory.allocations["activation"] == 2  # the temporary came from the memory manager too
    gc.collect()
    assert temporary() is not None and handle.event not in compute.waited  # the copy may be running
    offloader.after_forward(2)  # one layer later: the compute stream waits for the copy, then lets go
    gc.collect()
    assert handle.event in compute.waited and handle.source is None and temporary() is None


def test_a_finished_copy_needs_no_wait_and_layers_let_go_after_backward():
    cupy = FakeCupy()
    compute = cupy.cuda.get_current_stream()
    memory = Allocator(MemoryType.DEVICE, ops=FakeOps(DeviceArray))
    layers = [Saves(memory.zeros((2, 3), np.float32, "activation")), Saves(), Saves()]
    offloader = Offloader(layers, CupyOffloadOps(cupy, memory))
    offloader.after_forward(1)
    handle = layers[0]._x
    handle.event.done = True
    offloader.after_forward(2)
    assert handle.source is None and compute.waited == []
    offloader.before_backward(0)
    assert isinstance(layers[0]._x, DeviceArray) and handle.ready in compute.waited
    offloader.after_backward(0)
    assert layers[0]._x is None


def test_an_array_copied_back_comes_from_the_memory_manager():
    cupy = FakeCupy()
    memory = Allocator(MemoryType.DEVICE, ops=FakeOps(DeviceArray))
    ops = CupyOffloadOps(cupy, memory)
    host = np.arange(6, dtype=np.float32)
    array, event = ops.to_device(host)
    assert isinstance(array, DeviceArray) and memory.allocations["activation"] == 1
    np.testing.assert_array_equal(array, host)
