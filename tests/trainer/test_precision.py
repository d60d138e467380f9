"""Mixed precision: float16 storage with float32 masters, loss scaling, skipped overflow steps."""

from __future__ import annotations

import numpy as np
import pytest

from trainer import SGD, ConfigError, LossScaler, NeuralNetwork, build_mlp, synthetic


def test_loss_scaler_halves_on_overflow_and_grows_after_good_steps():
    scaler = LossScaler(scale=1024.0, growth_interval=3)
    assert scaler.update(False) is False and scaler.scale == 512.0 and scaler.skipped == 1
    assert all(scaler.update(True) for _ in range(3)) and scaler.scale == 1024.0
    with pytest.raises(ConfigError, match="scale_window"):
        LossScaler(growth_interval=0)


def _model(**params):
    return NeuralNetwork(build_mlp(6, hidden=[16], classes=3), "cross_entropy", SGD(0.5),
                         {"seed": 0, "mixed_precision": True, **params})


def test_overflow_skips_the_step_and_halves_the_scale():
    x, y = synthetic(20, (6,), classes=3, seed=0)
    model = _model(loss_scale=2.0 ** 40)  # the scaled float16 gradients overflow
    assert model.layers[1].params["W"].dtype == np.float16 and model.updater.master.dtype == np.float32
    before = model.updater.master.copy()
    model.fit(x, y, epochs=1, batch_size=20)
    assert model.scaler.skipped == 1 and model.scaler.scale == 2.0 ** 39
    np.testing.assert_array_equal(model.updater.master, before)


def test_mixed_precision_converges_on_a_small_problem():
    x, y = synthetic(300, (6,), classes=3, seed=0)
    model = _model(loss_scale=2.0 ** 24, scale_window=20)
    result = model.fit(x, y, epochs=15, batch_size=30)
    assert model.scaler.skipped >= 1  # it had to find a scale that fits float16
    assert result.history[-1].loss < 0.5 * result.history[0].loss and result.accuracy > 0.85
    reference = NeuralNetwork(build_mlp(6, hidden=[16], classes=3), "cross_entropy", SGD(0.5), {"seed": 0})
    assert abs(reference.fit(x, y, epochs=15, batch_size=30).accuracy - result.accuracy) < 0.05


def test_bfloat16_and_bad_settings_are_refused():
    with pytest.raises(ConfigError, match="bfloat16"):
        _model(mixed_precision="bfloat16")
    with pytest.raises(ConfigError, match="float32 master"):
        _model(dtype="float64")
