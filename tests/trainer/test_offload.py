"""Host offload: gradients and weights unchanged whether saved activations stay or travel."""

from __future__ import annotations

import numpy as np
import pytest

from trainer import (SGD, Activation, Conv2D, Dropout, Flatten, FullyConnected, Input, NeuralNetwork, Output,
                     Pooling2D, synthetic)
from trainer.backend import cupy_or_none
from trainer.offload import NumpyOps, Offloader


def _layers():
    return [Input((1, 6, 6)), Conv2D(2, 3, padding=1), Activation("relu"), Pooling2D(2), Flatten(),
            FullyConnected(10), Activation("tanh"), Dropout(0.2), FullyConnected(3), Output("softmax")]


def _train(device, offload, simulate=False):
    x, y = synthetic(60, (1, 6, 6), classes=3, seed=0)
    model = NeuralNetwork(_layers(), "cross_entropy", SGD(0.1, momentum=0.5),
                          {"device": device, "dtype": "float64", "offload": offload, "seed": 1})
    if simulate:  # the GPU's swapping bookkeeping, with plain host copies
        model._offloader = Offloader(model._train_layers, NumpyOps())
        for layer in model.layers:
            layer.cache_buffers = False
    model.fit(x, y, epochs=2, batch_size=20)
    return model


def test_offload_is_a_no_op_on_the_cpu():
    model = _train("cpu", True)
    assert model._offloader is None
    np.testing.assert_array_equal(model._flat_params, _train("cpu", False)._flat_params)


def test_swapping_saved_arrays_out_and_back_leaves_training_unchanged():
    model = _train("cpu", True, simulate=True)
    assert model._offloader.swapped_out >= 6 * 5  # 6 steps, several layers each
    np.testing.assert_array_equal(model._flat_params, _train("cpu", False)._flat_params)


def test_offload_on_the_gpu_gives_the_same_weights():
    if cupy_or_none() is None:
        pytest.skip("CuPy with a CUDA GPU is not available")
    np.testing.assert_allclose(_train("gpu", True)._flat_params.get(), _train("gpu", False)._flat_params.get(),
                               rtol=1e-12)
