"""The update pipeline on its own (no model, no MPI): parameter fusion, the reduction with
the loss slots, unscaling and the overflow skip, LARS ratios, the optimizer step and the
master copy, on stand-in layers."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from trainer import SGD, Allocator, LossScaler
from trainer.schedules import trust_ratio
from trainer.update import Updater


class Slot:
    """A stand-in layer: parameters and gradients by name, nothing else."""

    def __init__(self, **params):
        self.params = {k: np.asarray(v, np.float32) for k, v in params.items()}
        self.grads = {k: np.zeros_like(v) for k, v in self.params.items()}


class Doubling:
    """A reducer as if a second rank had computed exactly the same: the sum doubles."""

    def __init__(self, buffer):
        self.buffer, self.calls = buffer, 0

    def allreduce(self):
        self.buffer *= 2
        self.calls += 1


def lars_plan(coefficient=0.5, limits=(0.1, 10.0)):
    return SimpleNamespace(lars=True, trust_coefficient=coefficient, trust_limits=lambda step: limits)


def make(layers, half=None, scaler=None, reducer=None, lr=1.0, momentum=0.0):
    dtype = half or np.float32
    return Updater(layers, [i for i, layer in enumerate(layers) if layer.params], SGD(lr, momentum=momentum),
                   Allocator("host"), dtype, half, scaler, reducer)


def test_fusion_puts_every_parameter_and_gradient_in_one_buffer_each():
    layers = [Slot(), Slot(W=[[1, 2], [3, 4]], b=[5, 6]), Slot(W=[[7], [8]])]
    updater = make(layers)
    assert updater.flat_params.tolist() == [1, 2, 3, 4, 5, 6, 7, 8] and updater.n_params == 8
    assert updater.flat_grads.shape == (8 + 2,)  # two slots for the loss sum and correct count
    assert np.shares_memory(layers[1].params["b"], updater.flat_params)
    assert np.shares_memory(layers[2].grads["W"], updater.flat_grads)
    assert updater.param_index == [0, 0, 2] and updater.trainable == [1, 2]
    assert updater.memory.allocations["param"] == 1 and updater.memory.allocations["grad"] == 1


def test_apply_reduces_gradients_and_loss_in_one_call_then_steps():
    layers = [Slot(W=[1.0, 1.0]), Slot(b=[0.0])]
    updater = make(layers, reducer=Doubling)
    updater.flat_grads[:3] = [0.5, 0.25, 1.0]
    loss, correct = updater.apply(0, None, 3.0, 7)
    assert updater.reducer.calls == 1 and (float(loss), float(correct)) == (6.0, 14.0)
    assert updater.flat_params.tolist() == [0.0, 0.5, -2.0]  # p -= summed gradient (lr 1)
    updater.zero_grads()
    assert not updater.flat_grads.any()


def test_step_layer_updates_one_layer_alone():
    layers = [Slot(W=[1.0]), Slot(W=[1.0])]
    updater = make(layers, lr=0.5, momentum=0.5)
    updater.flat_grads[:2] = [1.0, 1.0]
    updater.step_layer(1)
    assert updater.flat_params.tolist() == [1.0, 0.5]


def test_mixed_precision_unscales_into_float32_steps_the_master_and_casts_back():
    layers = [Slot(W=[1.0, 2.0])]
    scaler = LossScaler(scale=1024.0)
    updater = make(layers, half=np.dtype(np.float16), scaler=scaler, lr=0.25)
    assert updater.flat_params.dtype == np.float16 and updater.master.dtype == np.float32
    # the backward pass ran on loss * scale * lr (plain SGD folds its rate into the gradient)
    updater.flat_grads[:] = np.array([0.5, 1.0]) * 1024 * 0.25
    updater.apply(0, None, 1.0, 1)
    np.testing.assert_array_equal(updater.master, [1.0 - 0.125, 2.0 - 0.25])
    np.testing.assert_array_equal(updater.flat_params, updater.master.astype(np.float16))
    assert layers[0].params["W"].dtype == np.float16 and scaler.skipped == 0


def test_overflow_skips_the_step_and_halves_the_scale():
    layers = [Slot(W=[1.0, 2.0])]
    scaler = LossScaler(scale=1024.0)
    updater = make(layers, half=np.dtype(np.float16), scaler=scaler)
    updater.flat_grads[:] = [np.inf, 1.0]
    loss, _ = updater.apply(0, None, 2.0, 1)
    assert float(loss) == 2.0 and scaler.skipped == 1 and scaler.scale == 512.0
    np.testing.assert_array_equal(updater.master, [1.0, 2.0])


def test_lars_scales_each_layer_by_its_trust_ratio():
    layers = [Slot(W=[3.0, 4.0]), Slot(W=[1.0])]
    updater = make(layers, lr=1.0)
    updater.flat_grads[:3] = [0.6, 0.8, 0.0]  # ||g|| = 1 for layer 0, 0 for layer 1
    updater.apply(0, lars_plan(), 0.0, 0)
    expected = trust_ratio(5.0, 1.0, 0.0, 0.5, (0.1, 10.0))
    assert updater.trust_ratios == [pytest.approx(expected), 1.0] and expected == pytest.approx(2.5)
    np.testing.assert_allclose(updater.flat_params, [3.0 - 2.5 * 0.6, 4.0 - 2.5 * 0.8, 1.0], rtol=1e-6)
    assert math.isclose(updater.trust_ratios[0], 2.5, rel_tol=1e-6)


class Counting(SGD):
    """SGD that counts the arrays it is given (``elementwise`` as the class says)."""

    def update(self, param, grad, state):
        self.sizes = getattr(self, "sizes", []) + [param.size]
        super().update(param, grad, state)


class PerTensor(Counting):
    elementwise = False  # e.g. an update that normalises each tensor: must see them one by one


@pytest.mark.parametrize("optimizer, sizes", [(Counting, [3]), (PerTensor, [2, 1])])
def test_an_elementwise_optimizer_updates_the_fused_buffer_in_one_call(optimizer, sizes):
    layers = [Slot(W=[1.0, 1.0]), Slot(b=[0.0])]
    updater = Updater(layers, [0, 1], optimizer(1.0), Allocator("host"), np.float32)
    updater.flat_grads[:3] = [0.5, 0.25, 1.0]
    updater.apply(0, None, 0.0, 0)
    assert updater.optimizer.sizes == sizes
    assert updater.flat_params.tolist() == [0.5, 0.75, -1.0]  # the same update either way
