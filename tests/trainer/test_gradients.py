"""Every layer and loss against central finite differences, in float64."""

from __future__ import annotations

import numpy as np
import pytest

from trainer.backend import to_numpy
from trainer.layers import Activation, Conv2D, Dropout, Flatten, FullyConnected, Output, Pooling2D
from trainer.losses import CrossEntropy, MeanSquaredError

EPS = 1e-6


def numeric_grad(f, array, xp) -> np.ndarray:
    """d f / d array by central differences, perturbing ``array`` in place."""
    grad = np.zeros(array.shape)
    flat = array.reshape(-1)
    for i in range(flat.size):
        old = float(flat[i])
        flat[i] = old + EPS
        up = f()
        flat[i] = old - EPS
        down = f()
        flat[i] = old
        grad.reshape(-1)[i] = (up - down) / (2 * EPS)
    return grad


def check_layer(layer, input_shape, xp, batch=3, training=True, seed=0, positive=False):
    """Check d(sum(out * R))/d(input) and /d(params) against finite differences."""
    rng = np.random.default_rng(seed)
    layer.setup(input_shape, xp, np.float64, np.random.default_rng(1))
    x_host = rng.standard_normal((batch, *input_shape))
    if positive:
        x_host = np.abs(x_host) + 0.1
    x = xp.asarray(x_host)
    weights = xp.asarray(rng.standard_normal((batch, *layer.output_shape)))

    def objective() -> float:
        layer.rng = np.random.default_rng(7)  # same dropout mask every call
        return float((layer.forward(x, training) * weights).sum())

    objective()
    dx = to_numpy(layer.backward(weights.copy())).copy()
    np.testing.assert_allclose(dx, numeric_grad(objective, x, xp), rtol=1e-5, atol=1e-7)
    for key, param in layer.params.items():
        analytic = to_numpy(layer.grads[key]).copy()
        np.testing.assert_allclose(analytic, numeric_grad(objective, param, xp), rtol=1e-5, atol=1e-7,
                                   err_msg=f"gradient of {key}")


def test_fully_connected(xp):
    check_layer(FullyConnected(4), (5,), xp)


@pytest.mark.parametrize("function", ["sigmoid", "relu", "tanh", "softmax", "identity"])
def test_activation(xp, function):
    check_layer(Activation(function), (6,), xp)


def test_output_softmax(xp):
    check_layer(Output("softmax"), (4,), xp)


@pytest.mark.parametrize("stride,padding", [(1, 0), (2, 1), ((1, 2), (2, 0))])
def test_conv2d(xp, stride, padding):
    check_layer(Conv2D(3, kernel_size=3, stride=stride, padding=padding), (2, 5, 6), xp, batch=2)


@pytest.mark.parametrize("mode", ["max", "average"])
@pytest.mark.parametrize("pool,stride,padding", [(2, None, 0), (3, 2, 1)])
def test_pooling(xp, mode, pool, stride, padding):
    check_layer(Pooling2D(pool, stride=stride, padding=padding, mode=mode), (2, 5, 6), xp, batch=2)


def test_flatten(xp):
    check_layer(Flatten(), (2, 3, 4), xp)


def test_dropout_training_and_eval(xp):
    check_layer(Dropout(0.4), (10,), xp)
    layer = Dropout(0.4)
    layer.setup((10,), xp, np.float64, np.random.default_rng(0))
    x = xp.ones((2, 10))
    assert layer.forward(x, training=False) is x


@pytest.mark.parametrize("targets", ["labels", "onehot"])
def test_cross_entropy(xp, targets):
    rng = np.random.default_rng(0)
    logits = xp.asarray(rng.standard_normal((4, 5)) * 3)
    labels = np.array([0, 3, 4, 1])
    target = xp.asarray(labels if targets == "labels" else np.eye(5)[labels])
    loss = CrossEntropy()
    loss.forward(logits, target)
    analytic = to_numpy(loss.backward()).copy()
    numeric = numeric_grad(lambda: float(CrossEntropy().forward(logits, target)), logits, xp)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-8)


def test_cross_entropy_is_safe_for_huge_logits(xp):
    logits = xp.asarray([[1000.0, -1000.0, 0.0], [-5e4, 5e4, 0.0]])
    value = float(CrossEntropy().forward(logits, xp.asarray([0, 0])))
    assert np.isfinite(value) and value == pytest.approx(1e5 / 2)


def test_mean_squared_error(xp):
    rng = np.random.default_rng(1)
    out = xp.asarray(rng.standard_normal((3, 4)))
    target = xp.asarray(rng.standard_normal((3, 4)))
    loss = MeanSquaredError()
    loss.forward(out, target)
    analytic = to_numpy(loss.backward()).copy()
    numeric = numeric_grad(lambda: float(MeanSquaredError().forward(out, target)), out, xp)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-8)
