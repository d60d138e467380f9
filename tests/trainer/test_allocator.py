"""The memory manager is what the model trains with: the ``memory`` setting decides where
parameters, gradients, optimizer state and activations live, and a training step makes no
array of that size anywhere else. The GPU types run here on a NumPy-backed fake device."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.fake_gpu import FakeOps
from trainer import (DATE, SGD, Activation, Adam, Allocator, ConfigError, Conv2D, Dropout, Flatten, FullyConnected,
                     Input, MemoryType, NeuralNetwork, Output, Pooling2D, build_mlp, synthetic)
from trainer.backend import cupy_or_none

CUDA_DEVICE_MEMORY, CUDA_MANAGED_MEMORY = 2, 3  # cudaMemoryType, as cudaPointerGetAttributes reports it
from trainer.objective import SettingsError, validate_settings


def conv_layers():
    return [Input((1, 6, 6)), Conv2D(4, 3, padding=1), Activation("relu"), Pooling2D(2),
            Conv2D(5, 2), Pooling2D(2, mode="average", padding=1), Flatten(), FullyConnected(20),
            Activation("tanh"), Dropout(0.2), FullyConnected(3), Output("softmax")]


def train(memory, epochs=2):
    x, y = synthetic(40, (1, 6, 6), classes=3, seed=0)
    model = NeuralNetwork(conv_layers(), "cross_entropy", SGD(0.1, momentum=0.5),
                          {"seed": 1, "dtype": "float64", "memory": memory})
    result = model.fit(x, y, epochs=epochs, batch_size=16)
    return model, result


def weights(model):
    return np.concatenate([np.asarray(p).ravel() for layer in model.layers for p in layer.params.values()])


@pytest.mark.parametrize("kind", list(MemoryType))
def test_the_memory_setting_decides_where_every_array_lives(kind):
    reference, expected = train("host")
    allocator = Allocator(kind, ops=None if kind is MemoryType.HOST else FakeOps())
    model, result = train(allocator)
    assert model.memory is allocator
    np.testing.assert_array_equal(weights(model), weights(reference))  # bit for bit, on any memory type
    assert result.loss == expected.loss
    made = allocator.allocations
    assert all(made[role] > 0 for role in ("param", "grad", "state", "activation", "staging"))
    # the samples cast to float64 once; on a device the labels are copied there too
    assert made["data"] == (1 if kind is MemoryType.HOST else 2)
    kept = allocator.kept()
    assert {m.mem_type for m in kept} == {kind} and len(allocator.kept("param")) == 1
    flat = allocator.kept("param")[0]
    assert flat.array is model.updater.flat_params  # the layers' weights are views into it
    assert np.shares_memory(model.layers[1].params["W"], flat.array)
    if kind is MemoryType.DEVICE:
        with pytest.raises(ConfigError, match="no host copies"):
            allocator.sync_host()
        return
    allocator.sync_host("param")
    np.testing.assert_array_equal(flat.host, flat.array)
    if kind is MemoryType.MANAGED:
        assert flat.host is not flat.array and flat.copies >= 1  # a real second copy, brought up to date
    velocity = allocator.kept("state")
    allocator.sync_host("state")
    assert all(np.array_equal(m.host, m.array) for m in velocity)


class Tracked(np.ndarray):
    """Every array the fake device's memory hands out is one of these, and so is every
    array NumPy derives from them: a new one that owns fresh memory is logged unless it
    is being made by the allocator."""

    log: list | None = None
    allocating = False

    def __array_finalize__(self, obj):
        if Tracked.log is None or Tracked.allocating:
            return
        base = self.base
        if base is None or (type(base) is np.ndarray and base.base is None):
            Tracked.log.append((self.shape, self.dtype))


class CountingNumpy:
    """NumPy as the model's ``xp``, logging the plain arrays its functions create."""

    def __getattr__(self, name):
        value = getattr(np, name)
        if not callable(value) or isinstance(value, type):
            return value

        def made(*args, **kwargs):
            out = value(*args, **kwargs)
            if Tracked.log is not None and type(out) is np.ndarray and out.base is None:
                Tracked.log.append((out.shape, out.dtype))
            return out
        return made


class TrackingOps(FakeOps):
    xp = CountingNumpy()

    def empty(self, shape, dtype, device_id):
        Tracked.allocating = True
        try:
            return np.empty(shape, dtype).view(Tracked)
        finally:
            Tracked.allocating = False

    empty_managed = empty


CONFIGS = {
    "conv, momentum, dropout": (conv_layers, "cross_entropy", lambda: SGD(0.1, momentum=0.5), {}),
    "mlp, DATE with LARS": (lambda: build_mlp((1, 6, 6), hidden=[24, 20], classes=3), "cross_entropy",
                            lambda: SGD(0.05, momentum=0.9), {"schedule": DATE(base_batch_size=4)}),
    "mlp, mixed precision, mse, adam": (lambda: build_mlp((1, 6, 6), hidden=[24], activation="sigmoid", classes=3,
                                                          output="identity"), "mse", lambda: Adam(0.01),
                                        {"mixed_precision": True}),
    "mlp, float16 GEMMs": (lambda: build_mlp((1, 6, 6), hidden=[24], classes=3), "cross_entropy",
                           lambda: SGD(0.1), {"gemm_dtype": "float16"}),
}


@pytest.mark.parametrize("config", list(CONFIGS))
def test_a_training_step_allocates_only_through_the_memory_manager(config):
    make_layers, loss, optimizer, params = CONFIGS[config]
    x, y = synthetic(40, (1, 6, 6), classes=3, seed=0)
    batch = 16
    allocator = Allocator(MemoryType.DEVICE, ops=TrackingOps())
    model = NeuralNetwork(make_layers(), loss, optimizer(), {"seed": 1, "memory": allocator, **params})
    step, outside = model._train_batch, []

    def logged_step(*args):
        Tracked.log = outside
        try:
            return step(*args)
        finally:
            Tracked.log = None

    model._train_batch = logged_step
    model.fit(x, y, epochs=1, batch_size=batch)
    warm = dict(allocator.allocations)
    model.fit(x, y, epochs=2, batch_size=batch)
    # outside the manager: only per-row or smaller temporaries (row maxima, label indices, norms)
    large = [(shape, dtype) for shape, dtype in outside
             if dtype.kind == "f" and int(np.prod(shape)) > batch]
    assert large == [], large
    assert len(outside) > 0  # the detector sees NumPy's temporaries (it is not blind)
    # steady state: every buffer reused, nothing new; fit copies the samples and labels once
    now = dict(allocator.allocations)
    assert now.pop("data") == warm.pop("data") + 2 and now == warm
    assert all(warm.get(role, 0) > 0 for role in ("param", "grad", "activation"))


def test_memory_setting_errors():
    layers = build_mlp(4, hidden=[3])
    with pytest.raises(ConfigError, match="memory 'device' is GPU memory"):
        NeuralNetwork(layers, params={"memory": "device"})
    with pytest.raises(ConfigError, match="memory: unknown memory type 'pinned'"):
        NeuralNetwork(build_mlp(4, hidden=[3]), params={"memory": "pinned"})
    with pytest.raises(SettingsError) as error:
        validate_settings({"memory": "pinned"}, "modules.t.settings")
    assert error.value.path == "modules.t.settings.memory"


@pytest.mark.gpu
@pytest.mark.skipif(cupy_or_none() is None, reason="CuPy with a CUDA GPU is not available")
def test_every_memory_type_on_the_gpu():
    cp = cupy_or_none()
    x, y = synthetic(64, (8,), classes=3, seed=0)
    found = {}
    for kind in MemoryType:
        if kind is MemoryType.HOST:
            with pytest.raises(ConfigError, match="memory 'host'"):
                NeuralNetwork(build_mlp(8, hidden=[16]), params={"device": "gpu", "memory": kind.value})
            continue
        model = NeuralNetwork(build_mlp(8, hidden=[16], classes=3, dropout=0.1), "cross_entropy", SGD(0.1, momentum=0.9),
                              {"device": "gpu", "memory": kind.value, "seed": 0})
        model.fit(x, y, epochs=2, batch_size=16)
        flat = model.memory.kept("param")[0]
        where = cp.cuda.runtime.pointerGetAttributes(flat.array.data.ptr).type
        found[kind] = (where, cp.asnumpy(model.updater.flat_params))
        if kind is not MemoryType.DEVICE:
            model.memory.sync_host("param")
            np.testing.assert_array_equal(flat.host, found[kind][1])  # readable from the host
    assert found[MemoryType.DEVICE][0] == CUDA_DEVICE_MEMORY
    assert found[MemoryType.MANAGED][0] == CUDA_DEVICE_MEMORY
    assert found[MemoryType.CUDA_MANAGED][0] == CUDA_MANAGED_MEMORY
    for kind in (MemoryType.MANAGED, MemoryType.CUDA_MANAGED):
        np.testing.assert_allclose(found[kind][1], found[MemoryType.DEVICE][1], rtol=1e-5, atol=1e-6)
    with pytest.raises(ConfigError, match="offload .* needs memory 'device'"):
        NeuralNetwork(build_mlp(8, hidden=[16]), params={"device": "gpu", "memory": "managed", "offload": True})
