"""DATE and linear scaling: the learning rate at chosen steps and its shape, LARS limits,
and the settings flowing from a trial dict through build_model."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trainer import DATE, SGD, ConfigError, LinearScaling, NeuralNetwork, build_mlp, build_model, synthetic
from trainer.schedules import build_schedule, trust_ratio

# B0 = 32, B = 128 (k = 4), 10 steps per epoch, 20 epochs: W = 2 * 4 * 10 = 80, T = 200
PLAN = DATE(base_batch_size=32, base_lr=0.1, warmup_epochs=2).plan(128, 10, 20, default_lr=0.5)


@pytest.mark.parametrize("step, expected", [
    (0, 0.2 / 80),              # warm-up start: peak / W, peak = 0.1 * sqrt(4)
    (39, 0.2 * 40 / 80),        # warm-up middle
    (79, 0.2),                  # warm-up end: the sqrt-scaled peak
    (80, 0.2),                  # decay start
    (140, 0.2 * 60 / 120),      # linear decay: peak * (T - t) / (T - W)
    (199, 0.2 / 120),           # last step
    (250, 1e-6),                # floor
])
def test_date_learning_rate_follows_the_formulas(step, expected):
    assert PLAN.warmup_steps == 80 and PLAN.total_steps == 200
    assert math.isclose(PLAN.lr(step), expected, rel_tol=1e-12)


def test_date_shape_is_one_rise_then_one_straight_decay_without_restarts():
    rates = np.array([PLAN.lr(t) for t in range(260)])
    assert (np.diff(rates[:80]) > 0).all()                            # warm-up: strictly rising
    assert rates[79] == rates[80] == rates.max() == 0.2               # the peak, held for one step
    np.testing.assert_allclose(np.diff(rates[80:200]), -0.2 / 120)   # one straight line down
    assert (rates[200:] == 1e-6).all()                                # then the floor, no restart


def test_linear_scaling_holds_its_peak_after_the_warm_up():
    plan = LinearScaling(base_batch_size=10, base_lr=0.1, warmup_epochs=2).plan(40, 5, 6, default_lr=1.0)
    rates = np.array([plan.lr(t) for t in range(30)])
    assert (np.diff(rates[:10]) > 0).all() and (rates[9:] == rates.max()).all()
    assert math.isclose(rates.max(), 0.4)


def test_date_floor_and_sqrt_scaling():
    tiny = DATE(base_batch_size=10, base_lr=1e-5, warmup_epochs=0, min_lr=1e-6, total_steps=1000)
    plan = tiny.plan(40, 5, 1, default_lr=1.0)
    assert math.isclose(plan.lr(0), 2e-5) and plan.lr(999) == 1e-6  # 2e-5 / 1000 < floor
    linear = LinearScaling(base_batch_size=10, base_lr=0.1, warmup_epochs=1).plan(40, 5, 4, default_lr=1.0)
    assert linear.warmup_steps == 5 and math.isclose(linear.lr(4), 0.4) and math.isclose(linear.lr(19), 0.4)
    assert math.isclose(DATE(base_batch_size=10).plan(160, 5, 4, default_lr=0.3).peak_lr, 1.2)


def test_trust_limits_open_over_the_warm_up():
    lo, hi = PLAN.trust_limits(0)
    assert math.isclose(lo, 1 - 0.9 / 80) and math.isclose(hi, 1 + 9 / 80)
    assert PLAN.trust_limits(79) == PLAN.trust_limits(150) == (0.1, 10.0)
    assert trust_ratio(100.0, 1.0, 0.0, 1.0, (0.1, 10.0)) == 10.0
    assert trust_ratio(1.0, 100.0, 0.0, 1.0, (0.1, 10.0)) == 0.1
    assert math.isclose(trust_ratio(2.0, 1.0, 0.5, 1.0, (0.1, 10.0)), 1.0)  # 2 / (1 + 0.5 * 2)
    assert trust_ratio(0.0, 1.0, 0.0, 1.0, (0.5, 2.0)) == 1.0


def _fit(optimizer, schedule, epochs=3):
    x, y = synthetic(240, (6,), classes=3, seed=1)
    model = NeuralNetwork(build_mlp(6, hidden=[12, 12], classes=3), "cross_entropy", optimizer,
                          {"dtype": "float64", "seed": 2, "schedule": schedule})
    seen = []
    model.fit(x, y, epochs=epochs, batch_size=40,
              callback=lambda stats, m: seen.append((m._plan.trust_limits(m._step - 1), list(m.trust_ratios))))
    return model, seen


def test_lars_ratios_stay_within_their_limits_and_the_lr_is_applied():
    schedule = DATE(base_batch_size=10, warmup_epochs=0.25, trust_coefficient=1.0, trust_min=0.5, trust_max=2.0)
    model, seen = _fit(SGD(0.05, momentum=0.9), schedule)
    for (lo, hi), ratios in seen:
        assert len(ratios) == 3 and all(lo <= r <= hi for r in ratios)
    assert seen[-1][0] == (0.5, 2.0)
    assert model.optimizer.lr == model._plan.lr(17)  # 3 epochs x 6 steps


class UnfoldedSGD(SGD):
    """Plain SGD that does not fold its learning rate into the gradients."""

    @property
    def grad_scale(self) -> float:
        return 1.0

    def update(self, param, grad, state):
        param *= 1.0 - self.rate * self.weight_decay
        param -= self.rate * grad


def test_lars_sees_the_true_gradient_when_sgd_folds_its_learning_rate():
    schedule = DATE(base_batch_size=10, warmup_epochs=0.5)
    folded, _ = _fit(SGD(0.1, weight_decay=1e-3), schedule)
    plain, _ = _fit(UnfoldedSGD(0.1, weight_decay=1e-3), schedule)
    np.testing.assert_allclose(folded.updater.flat_params, plain.updater.flat_params, rtol=1e-10, atol=1e-12)


def test_date_settings_flow_from_a_trial_through_build_model():
    trial = {"hidden": [8], "learning_rate": 0.1, "batch_size": 40, "schedule": "date",
             "base_batch_size": 10, "warmup_epochs": 0.5, "lars": False, "width_note": "ignored"}
    model = build_model(trial, input_shape=6, classes=3)
    assert model.schedule == DATE(base_batch_size=10, warmup_epochs=0.5, lars=False)
    x, y = synthetic(200, (6,), classes=3, seed=0)
    model.fit(x, y, epochs=1)
    assert math.isclose(model.optimizer.lr, 0.2 * (5 / 10))  # step 4 of W = 0.5 * 4 * 5 = 10


@pytest.mark.parametrize("settings, message", [
    ({"base_lr": 0.1}, "need schedule: date or linear"),
    ({"schedule": "date"}, "needs base_batch_size"),
    ({"schedule": "cosine"}, "unknown schedule"),
    ({"schedule": "linear", "base_batch_size": 8, "lars": True}, "has no setting"),
    ({"schedule": "date", "base_batch_size": 0}, "base_batch_size must be"),
    ({"schedule": "date", "base_batch_size": 8, "trust_min": 2}, "trust_min must be"),
    ({"schedule": "date", "base_batch_size": 8, "warmup_epochs": -1}, "warmup_epochs must be"),
])
def test_bad_schedule_settings_name_the_setting(settings, message):
    with pytest.raises(ConfigError, match=message):
        build_schedule(settings)
