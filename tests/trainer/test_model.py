"""NeuralNetwork end to end: MNIST accuracy, callbacks, results, and every bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trainer import (Activation, Adam, ConfigError, Conv2D, Dropout, EpochStats, Flatten, FullyConnected, Input, Layer,
                     NeuralNetwork, Output, Pooling2D, SGD, ShapeMismatchError, StopTraining, TrainerError,
                     TrainingDiverged, build_mlp, build_model, load_mnist5k, prepare, split)

MNIST_PARAMS = {"hidden": [256, 256, 256], "activation": "relu", "optimizer": "sgd",
                "learning_rate": 0.1, "weight_decay": 0.001, "batch_size": 100, "epochs": 20, "seed": 0}


# The tests of the MNIST training run on one xdist worker (one group), so that they share
# mnist_result: each worker would train its own copy of the model (~2 s of CPU each). The
# layers are 256 wide, not the benchmarks' 528 (trainer_bench.py): the same layers and
# code, a third of the arithmetic, here and in the PyTorch reference.
same_worker = pytest.mark.xdist_group("trainer-mnist")


@pytest.fixture(scope="module")
def mnist():
    x, y = prepare(*load_mnist5k())
    return split(x, y, n_train=4000, seed=0)


@pytest.fixture(scope="module")
def mnist_result(mnist):
    x_tr, y_tr, x_te, y_te = mnist
    model = build_model(MNIST_PARAMS)
    return model, model.fit(x_tr, y_tr, validation=(x_te, y_te))


def tiny_data(n=60, features=4, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.random((n, features)).astype(np.float32)
    return x, (x[:, 0] > x[:, 1]).astype(np.int64)


@same_worker
def test_mnist_subset_accuracy(mnist_result):
    """784-256-256-256-10 relu, SGD 0.1, wd 0.001, batch 100, 20 epochs: PyTorch reaches ~93%."""
    _, result = mnist_result
    assert result.val_accuracy >= 0.91
    assert result.epochs == 20 and len(result.history) == 20 and not result.stopped_early
    assert result.history[-1].loss < result.history[0].loss and result.accuracy > 0.95
    assert result.time > 0 and result.as_dict()["history"][0]["epoch"] == 0


@pytest.mark.slow
@same_worker
def test_mnist_matches_pytorch(mnist, mnist_result):
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # one thread, as NumPy's BLAS in a worker (tests/conftest.py)
    try:
        torch_acc = _torch_accuracy(torch, mnist)
    finally:
        torch.set_num_threads(threads)
    assert mnist_result[1].val_accuracy >= torch_acc - 0.01


def _torch_accuracy(torch, mnist) -> float:
    """The validation accuracy of MNIST_PARAMS's network trained by PyTorch."""
    x_tr, y_tr, x_te, y_te = mnist
    torch.manual_seed(0)
    layers, width = [], 784
    for hidden in MNIST_PARAMS["hidden"]:
        layers += [torch.nn.Linear(width, hidden), torch.nn.ReLU()]
        width = hidden
    net = torch.nn.Sequential(*layers, torch.nn.Linear(width, 10))
    opt = torch.optim.SGD(net.parameters(), lr=0.1, weight_decay=0.001)
    xt, yt = torch.from_numpy(x_tr), torch.from_numpy(y_tr)
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        perm = torch.randperm(len(xt), generator=gen)
        for i in range(0, len(xt), 100):
            idx = perm[i:i + 100]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(xt[idx]), yt[idx]).backward()
            opt.step()
    with torch.no_grad():
        return (net(torch.from_numpy(x_te)).argmax(1).numpy() == y_te).mean()


@same_worker
def test_predict_and_evaluate(mnist, mnist_result):
    model, result = mnist_result
    _, _, x_te, y_te = mnist
    probs = model.predict(x_te)
    assert probs.shape == (1000, 10) and np.allclose(probs.sum(axis=1), 1, atol=1e-5)
    loss, acc = model.evaluate(x_te, y_te)
    assert acc == pytest.approx(result.val_accuracy) and loss == pytest.approx(result.val_loss, rel=1e-5)
    assert (probs.argmax(axis=1) == y_te).mean() == pytest.approx(acc)


def test_runs_on_each_device(device):
    x, y = tiny_data()
    model = NeuralNetwork(build_mlp(4, hidden=[16], classes=2), "cross_entropy", SGD(0.5), {"device": device})
    result = model.fit(x, y, epochs=30, batch_size=16)
    assert result.accuracy > 0.8


def test_callback_stops_early_and_sees_stats():
    x, y = tiny_data()
    seen: list[EpochStats] = []

    def stop_at_two(stats, model):
        seen.append(stats)
        return stats.epoch == 1

    model = NeuralNetwork(build_mlp(4, hidden=[8], classes=2), params={"seed": 1})
    result = model.fit(x, y, epochs=10, batch_size=20, callback=stop_at_two, validation=(x, y))
    assert result.epochs == 2 and result.stopped_early and [s.epoch for s in seen] == [0, 1]
    assert seen[0].val_accuracy is not None and math.isfinite(seen[0].loss)

    def raise_stop(stats, model):
        raise StopTraining("pruned")

    result = model.fit(x, y, epochs=5, callback=[lambda s, m: None, raise_stop])
    assert result.epochs == 1 and result.stopped_early


def test_nan_loss_raises_training_diverged():
    x, y = tiny_data()
    x[5, 2] = np.nan
    model = NeuralNetwork(build_mlp(4, hidden=[8], classes=2))
    with pytest.raises(TrainingDiverged, match="loss became nan") as info:
        model.fit(x, y, epochs=2, batch_size=10)
    assert isinstance(info.value, TrainerError) and info.value.epoch == 0 and info.value.batch in range(6)
    huge = NeuralNetwork(build_mlp(4, hidden=[64, 64], activation="relu", classes=2, output="identity"),
                         "mse", SGD(1e6))
    with pytest.raises(TrainingDiverged):
        huge.fit(x[10:] * 100, y[10:], epochs=50, batch_size=10)


def test_shape_mismatch_names_the_layer():
    layers = [Input(784), FullyConnected(528, name="fc1"), Activation("relu"),
              FullyConnected(528, in_features=256, name="fc2"), Output()]
    with pytest.raises(ShapeMismatchError, match=r"layer 3 \(FullyConnected 'fc2'\): expects input of 256 features, "
                                                 r"got 528"):
        NeuralNetwork(layers)
    with pytest.raises(ShapeMismatchError, match=r"layer 1 \(FullyConnected\).*Flatten"):
        NeuralNetwork([Input((1, 28, 28)), FullyConnected(10), Output()])
    with pytest.raises(ShapeMismatchError, match=r"layer 1 \(Conv2D 'c'\).*does not fit"):
        NeuralNetwork([Input((1, 4, 4)), Conv2D(2, 5, name="c"), Flatten(), Output()])
    model = NeuralNetwork(build_mlp(4, hidden=[3]))
    with pytest.raises(ShapeMismatchError, match=r"shape \(5,\).*expects \(4,\)"):
        model.fit(np.zeros((2, 5), np.float32), np.zeros(2, np.int64))


def test_bad_settings():
    with pytest.raises(ConfigError, match="first layer must be an Input"):
        NeuralNetwork([FullyConnected(3)])
    with pytest.raises(ConfigError, match="unknown model setting"):
        NeuralNetwork(build_mlp(4), params={"learnign_rate": 1})
    with pytest.raises(ConfigError, match="unknown activation"):
        build_mlp(4, activation="swish")
    with pytest.raises(ConfigError, match="unknown loss"):
        NeuralNetwork(build_mlp(4), loss="hinge")


def test_small_convnet_learns(device):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 64)
    x = rng.random((64, 1, 8, 8)).astype(np.float32) * 0.2
    x[y == 1, :, 2:6, 2:6] += 1.0  # class 1 has a bright square
    layers = [Input((1, 8, 8)), Conv2D(4, 3, padding=1, name="conv"), Activation("relu"),
              Pooling2D(2, mode="max"), Conv2D(4, 3, stride=2), Pooling2D(2, mode="average", padding=1),
              Flatten(), Dropout(0.1), FullyConnected(2), Output()]
    model = NeuralNetwork(layers, "cross_entropy", Adam(0.01), {"device": device, "batch_size": 16})
    assert model.fit(x, y, epochs=15).accuracy > 0.9
    assert "conv" in model.summary()


class Scale(Layer):
    """A custom layer: multiply by a learned scalar."""

    def build(self, input_shape):
        self.params = {"s": self.xp.ones((1,), dtype=self.dtype)}
        return input_shape

    def forward(self, x, training=True):
        self._x = x
        return x * self.params["s"]

    def backward(self, grad, need_input_grad=True):
        self.grads["s"][...] = (grad * self._x).sum()
        return grad * self.params["s"] if need_input_grad else None


def test_custom_layer_and_float64():
    x, y = tiny_data()
    layers = [Input(4), Scale(name="scale"), FullyConnected(8), Activation("tanh"), FullyConnected(2), Output()]
    model = NeuralNetwork(layers, "cross_entropy", SGD(0.3, momentum=0.5), {"dtype": "float64"})
    before = float(layers[1].params["s"][0])
    result = model.fit(x, y, epochs=20, batch_size=10)
    assert layers[1].params["s"].dtype == np.float64 and float(layers[1].params["s"][0]) != before
    assert result.accuracy > 0.7


def test_float16_gemm_setting():
    x, y = tiny_data()
    model = NeuralNetwork(build_mlp(4, hidden=[8], classes=2), params={"gemm_dtype": "float16"})
    assert model.layers[1].gemm_dtype == np.float16 and model.layers[1].params["W"].dtype == np.float32
    assert math.isfinite(model.fit(x, y, epochs=2).loss)


def test_mse_regression_output():
    rng = np.random.default_rng(0)
    x = rng.random((80, 3)).astype(np.float32)
    target = (x @ np.array([[1.0], [-2.0], [0.5]], np.float32))
    model = NeuralNetwork(build_mlp(3, hidden=[16], classes=1, output="identity"), "mse", Adam(0.01))
    result = model.fit(x, target, epochs=60, batch_size=16)
    assert result.loss < 0.05 and result.history[0].loss > result.loss
