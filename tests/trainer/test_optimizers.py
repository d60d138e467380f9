"""Each optimizer decreases a convex loss; a custom optimizer needs only ``update``."""

from __future__ import annotations

import numpy as np
import pytest

from trainer import SGD, Adagrad, Adam, ConfigError, NeuralNetwork, Optimizer, RMSprop, build_mlp, get_optimizer
from trainer.build import build_optimizer

OPTIMIZERS = [
    lambda: SGD(0.05),
    lambda: SGD(0.05, momentum=0.9, weight_decay=1e-3),
    lambda: SGD(0.05, weight_decay=1e-3),
    lambda: Adagrad(0.3),
    lambda: RMSprop(0.01),
    lambda: Adam(0.05, weight_decay=1e-4),
]


def quadratic_descent(opt: Optimizer, xp, steps: int = 200) -> tuple[float, float]:
    """Minimise 0.5 * ||A p - b||^2 from a fixed start; return (first, last) loss."""
    rng = np.random.default_rng(0)
    a = xp.asarray(rng.standard_normal((8, 5)))
    b = xp.asarray(rng.standard_normal(8))
    p = xp.asarray(rng.standard_normal(5))
    losses = []
    for _ in range(steps):
        r = a @ p - b
        losses.append(float(0.5 * (r * r).sum()))
        grad = (a.T @ r) * opt.grad_scale
        opt.step([p], [grad])
    return losses[0], losses[-1]


@pytest.mark.parametrize("make", OPTIMIZERS, ids=["sgd", "momentum", "sgd-wd", "adagrad", "rmsprop", "adam"])
def test_optimizer_decreases_convex_loss(xp, make):
    first, last = quadratic_descent(make(), xp)
    assert last < 0.5 * first


class SignSGD(Optimizer):
    """A custom optimizer: step against the sign of the gradient."""

    def update(self, param, grad, state):
        param -= self.lr * (grad > 0) - self.lr * (grad < 0)


def test_custom_optimizer(xp):
    first, last = quadratic_descent(SignSGD(0.01), xp)
    assert last < first
    x = np.random.default_rng(0).random((64, 4)).astype(np.float32)
    y = (x.sum(axis=1) > 2).astype(np.int64)
    model = NeuralNetwork(build_mlp(4, hidden=[8], classes=2), "cross_entropy", SignSGD(0.01))
    assert np.isfinite(model.fit(x, y, epochs=2, batch_size=16).loss)


def test_a_step_keeps_one_state_per_parameter_and_an_empty_step_does_nothing():
    opt = SGD(0.1, momentum=0.9)
    opt.step([], [], first=0)
    assert opt.states == []
    params = [np.ones(2), np.ones(3)]
    opt.step(params, [np.ones(2), np.ones(3)], first=2)
    assert len(opt.states) == 4 and opt.states[:2] == [{}, {}]
    assert all("velocity" in state for state in opt.states[2:])


def test_a_subclass_that_overrides_update_has_no_inherited_fused_kernel():
    """A user's Adam with its own rule must not run Adam's kernel on a GPU; one that keeps
    Adam's rule (only a new default, say) keeps the kernel."""
    class MyAdam(Adam):
        def update(self, param, grad, state):
            param -= self.lr * grad

    class SlowAdam(Adam):
        def __init__(self):
            super().__init__(lr=1e-4)

    assert MyAdam().fused is None
    assert SlowAdam().fused == Adam().fused is not None
    assert SGD(0.1, momentum=0.9).fused is not None


def test_get_optimizer_by_name():
    opt = get_optimizer("sgd", learning_rate=0.05, weight_decay=0.001, momentum=0.5)
    assert isinstance(opt, SGD) and (opt.lr, opt.weight_decay, opt.momentum) == (0.05, 0.001, 0.5)
    assert isinstance(build_optimizer("adam", {"learning_rate": 0.01, "hidden": [5]}), Adam)
    with pytest.raises(ConfigError, match="unknown optimizer"):
        get_optimizer("lbfgs")
    with pytest.raises(ConfigError, match="no setting"):
        get_optimizer("adam", momentum=0.9)
    with pytest.raises(ConfigError, match="learning rate"):
        SGD(-1)
