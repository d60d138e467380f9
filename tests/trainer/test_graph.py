"""The training step as a CUDA graph (trainer.graph): warm-up, capture and replay per batch
shape, a failed capture running eagerly, what keeps a fit eager; a data-parallel step as
two graphs around the Allreduce, or eager with a blocker (fake ops and a fake two-rank
communicator; the GPU case is in test_dataparallel.py); on a GPU, replayed steps
giving the eager steps' losses and weights, schedules taking effect inside the graph, and
the fused kernels (optimizer updates, bias with activation, cross-entropy) matching NumPy."""

from __future__ import annotations

import contextlib
import logging

import numpy as np
import pytest

import trainer.model as model_module
from trainer import (DATE, SGD, Activation, Adagrad, Adam, ConfigError, Dropout, FullyConnected, Input, Layer,
                     LinearScaling, NeuralNetwork, Optimizer, Output, RMSprop, build_mlp, synthetic)
from trainer.backend import cupy_or_none
from trainer.graph import NO_GRAPH_ENV, StepGraph, graph_blocker
from trainer.losses import Loss, get_loss

needs_gpu = pytest.mark.skipif(cupy_or_none() is None, reason="CuPy with a CUDA GPU is not available")


class FakeOps:
    """Stands for CupyGraphOps: records what StepGraph asks, in order."""

    def __init__(self, fail_end: bool = False) -> None:
        self.calls: list[str] = []
        self.capturing = False
        self.fail_end = fail_end
        self.graphs = 0

    def on_stream(self):
        return contextlib.nullcontext()

    def private_memory(self):
        ops = self

        class Private:
            def __enter__(self):
                ops.calls.append("private")

            def __exit__(self, *exc):
                ops.calls.append("shared")

        return Private()

    def begin(self):
        self.capturing = True
        self.calls.append("begin")

    def end(self):
        self.capturing = False
        self.calls.append("end")
        if self.fail_end:
            raise RuntimeError("capture invalidated")
        self.graphs += 1
        return f"graph {self.graphs}"

    def launch(self, graph):
        self.calls.append(f"launch {graph}")


def test_a_shape_runs_eagerly_once_then_is_captured_then_replayed():
    ops = FakeOps()
    graph = StepGraph(ops)
    ran = []

    def body():
        ran.append("capturing" if ops.capturing else "eager")
        return f"result {len(ran)}"

    assert graph.run("a", body) == "result 1"  # warm-up, eager, in the graph's own pool
    assert ops.calls == ["private", "shared"] and ran == ["eager"]
    assert graph.run("a", body) == "result 2"  # captured, then launched once
    assert ops.calls[2:] == ["private", "begin", "end", "shared", "launch graph 1"] and ran[-1] == "capturing"
    assert graph.run("a", body) == "result 2"  # replayed: the captured arrays, body not called
    assert len(ran) == 2 and ops.calls[-1] == "launch graph 1"
    graph.run("b", body)  # another shape (a last partial batch) warms up on its own
    assert ran[-1] == "eager" and (graph.captures, graph.launches) == (1, 2)
    graph.forget()  # what the graphs held was replaced: warm up and capture again
    graph.run("a", body)
    assert ran[-1] == "eager" and ops.calls[-1] == "shared"


@pytest.mark.parametrize("where", ["body", "end"])
def test_a_capture_that_fails_leaves_that_shape_eager(where, caplog):
    ops = FakeOps(fail_end=where == "end")
    graph = StepGraph(ops)
    ran = []

    def body():
        ran.append("capturing" if ops.capturing else "eager")
        if ops.capturing and where == "body":
            raise RuntimeError("synchronous copy while capturing")
        return len(ran)

    graph.run("a", body)
    with caplog.at_level(logging.DEBUG, logger="diel.trainer"):
        assert graph.run("a", body) == 3  # the failed capture ran nothing: the step runs eagerly
    assert ran == ["eager", "capturing", "eager"] and not ops.capturing
    assert "running it eagerly" in caplog.text and list(graph.failed) == ["a"]
    graph.run("a", body)
    assert ran[-1] == "eager" and graph.captures == 0 and graph.launches == 0


class SignSGD(Optimizer):
    """A custom optimizer without a fused update."""

    elementwise = True

    def update(self, param, grad, state):
        param -= self.lr * ((grad > 0) * 1.0 - (grad < 0))


class Scale(Layer):
    """A custom layer that does not say it is graph-safe."""

    def forward(self, x, training=True):
        return x

    def backward(self, grad, need_input_grad=True):
        return grad


class Half(Loss):
    """A custom loss that does not say it is graph-safe."""


def blocker(**changes):
    settings = {"setting": True, "on_gpu": True, "device_memory": True, "mixed_precision": False,
                "offload": False, "lars": False, "optimizer": SGD(0.1), "layers": build_mlp(4, hidden=[8]),
                "loss": get_loss("cross_entropy"), **changes}
    return graph_blocker(**settings)


@pytest.mark.parametrize("changes, reason", [
    ({"setting": False}, "cuda_graph is off"),
    ({"on_gpu": False}, "on the CPU"),
    ({"device_memory": False}, "memory is not 'device'"),
    ({"mixed_precision": True}, "mixed precision"),
    ({"offload": True}, "offload"),
    ({"lars": True}, "LARS"),
    ({"optimizer": SignSGD(0.1)}, "SignSGD has no fused update"),
    ({"layers": [Input(4), Dropout(0.5), FullyConnected(2)]}, "layer 1 (Dropout) is not graph-safe"),
    ({"layers": [Input(4), Scale(name="s"), FullyConnected(2)]}, "layer 1 (Scale 's') is not graph-safe"),
    ({"loss": Half()}, "loss Half is not graph-safe"),
])
def test_what_keeps_a_fit_eager(changes, reason):
    assert reason in blocker(**changes)


def test_a_capturable_fit_and_the_switch(monkeypatch):
    for optimizer in (SGD(0.1, momentum=0.9), Adagrad(), RMSprop(), Adam()):
        assert blocker(optimizer=optimizer) is None
    assert blocker(layers=[Input(4), Dropout(0.0), FullyConnected(2), Output()]) is None
    monkeypatch.setenv(NO_GRAPH_ENV, "0")
    assert blocker() is None
    monkeypatch.setenv(NO_GRAPH_ENV, "1")
    assert blocker() == f"{NO_GRAPH_ENV} is set"


def test_the_setting_is_checked_and_the_cpu_never_captures():
    with pytest.raises(ConfigError, match="cuda_graph must be true or false"):
        NeuralNetwork(build_mlp(4), params={"cuda_graph": "yes"})
    x, y = synthetic(50, (4,), classes=2, seed=0)
    runs = [NeuralNetwork(build_mlp(4, hidden=[8], classes=2), "cross_entropy", SGD(0.1, weight_decay=1e-3),
                          {"cuda_graph": on, "seed": 0}) for on in (True, False)]
    losses = [model.fit(x, y, epochs=2, batch_size=20).loss for model in runs]
    assert losses[0] == losses[1] and runs[0]._graph is None and not runs[0].updater.fused


class FakeComm:
    """Rank ``rank`` of two, alone in this process: what a model asks of its communicator."""

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def Get_rank(self):
        return self.rank

    def Get_size(self):
        return 2

    def bcast(self, value, root=0):
        return value

    def allgather(self, value):
        return [value, value]


def data_parallel(monkeypatch, rank=0, layers=None, optimizer=None, **params):
    """A model as rank ``rank`` of two whose graph check sees a GPU with device memory; its
    graphs are FakeOps (a launch runs nothing) and its Allreduce is recorded in their
    calls, failing if it ever runs inside a capture. Returns it, the ops and the blocker's
    reasons."""
    ops, reasons = FakeOps(), []

    def on_a_gpu(setting, on_gpu, device_memory, *rest):
        reasons.append(graph_blocker(setting, True, True, *rest))
        return reasons[-1]

    class Reducer:
        def __init__(self, comm, buffer, is_gpu):
            self.calls = 0

        def allreduce(self):
            assert not ops.capturing, "the Allreduce ran inside a capture"
            ops.calls.append("allreduce")
            self.calls += 1

    monkeypatch.setattr(model_module, "graph_blocker", on_a_gpu)
    monkeypatch.setattr(model_module, "CupyGraphOps", lambda xp: ops)
    monkeypatch.setattr(model_module, "GradientReducer", Reducer)
    model = NeuralNetwork(layers or build_mlp(4, hidden=[8], classes=2), "cross_entropy", optimizer or SGD(0.1),
                          {"comm": FakeComm(rank), "seed": 0, **params})
    return model, ops, reasons


def test_a_data_parallel_step_is_two_graphs_around_the_allreduce(monkeypatch):
    model, ops, reasons = data_parallel(monkeypatch, rank=1)
    x, y = synthetic(41, (4,), classes=2, seed=0)
    model.fit(x, y, epochs=2, batch_size=20)  # rank 1's slices: 10, 10 and 0 rows (a last batch of 1)
    warm, capture = ["private", "shared"], ["private", "begin", "end", "shared"]
    gradients, update = "launch graph 1", "launch graph 2"
    assert reasons == [None] and ops.calls == [
        *warm, "allreduce", *warm,  # the gradients' part and the update's run once eagerly
        *capture, gradients, "allreduce", *capture, update,  # then each is captured
        "allreduce", update,  # an empty slice: its zero gradients eagerly, the update replayed
        *[gradients, "allreduce", update] * 2, "allreduce", update]  # the second epoch: replays only
    assert (model._graph.captures, model._graph.launches, model.reducer.calls) == (2, 8, 6)


@pytest.mark.parametrize("changes, reason", [
    ({"mixed_precision": True}, "mixed precision"),
    ({"schedule": DATE(base_batch_size=5, warmup_epochs=0.2)}, "LARS"),
    ({"layers": [Input(4), FullyConnected(8), Dropout(0.5), FullyConnected(2), Output()]},
     "layer 2 (Dropout) is not graph-safe"),
    ({"optimizer": SignSGD(0.1)}, "SignSGD has no fused update"),
])
def test_a_data_parallel_step_with_a_blocker_stays_eager(monkeypatch, changes, reason):
    model, ops, reasons = data_parallel(monkeypatch, **changes)
    x, y = synthetic(41, (4,), classes=2, seed=0)
    model.fit(x, y, epochs=1, batch_size=20)
    assert reason in reasons[0] and model._graph is None and ops.calls == ["allreduce"] * 3


def test_fused_numbers_follow_the_settings():
    assert SGD(0.1, momentum=0.5, weight_decay=0.01).fused_numbers({}) == [0.1, 0.01, 0.5]
    assert SGD(0.1).fused_slots == () and SGD(0.1, momentum=0.5).fused_slots == ("velocity",)
    adam, state = Adam(0.01, beta1=0.5, beta2=0.75), {}
    first, second = adam.fused_numbers(state), adam.fused_numbers(state)
    assert state["t"] == 2 and first[0] == pytest.approx(0.01 / 0.5) and second[0] == pytest.approx(0.01 / 0.75)
    assert second[7] == pytest.approx(1 / (1 - 0.75 ** 2) ** 0.5)
    assert SignSGD.fused is None


# -- on a GPU --------------------------------------------------------------------------------
OPTIMIZERS = {"sgd-wd": lambda: SGD(0.05, weight_decay=1e-3), "momentum": lambda: SGD(0.05, momentum=0.9),
              "adagrad": lambda: Adagrad(0.05), "rmsprop": lambda: RMSprop(0.001),
              "adam": lambda: Adam(0.005, weight_decay=1e-4)}


def train(device: str, make_optimizer, graph: bool = True, epochs: int = 3, dtype: str = "float32",
          layers=None, callback=None, **params) -> NeuralNetwork:
    """A small sigmoid/relu MLP on 250 samples at batch 100 (so a partial last batch of 50)."""
    x, y = synthetic(250, (12,), classes=4, seed=1)
    if layers is None:
        layers = [Input(12), FullyConnected(16), Activation("sigmoid"), FullyConnected(16), Activation("relu"),
                  FullyConnected(4), Output()]
    model = NeuralNetwork(layers, "cross_entropy", make_optimizer(),
                          {"device": device, "seed": 0, "cuda_graph": graph, "dtype": dtype, **params})
    model.history = model.fit(x, y, epochs=epochs, batch_size=100, callback=callback).history
    return model


def weights(model: NeuralNetwork) -> np.ndarray:
    return np.asarray(model.updater.flat_params.get() if model.device.is_gpu else model.updater.flat_params)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_graph_replays_the_eager_steps(name):
    graph, eager = train("gpu", OPTIMIZERS[name]), train("gpu", OPTIMIZERS[name], graph=False)
    assert graph._graph.captures == 2 and graph._graph.launches == 3 * 3 - 2  # 2 shapes: full and partial batch
    assert eager._graph is None and not graph._graph.failed
    np.testing.assert_allclose([h.loss for h in graph.history], [h.loss for h in eager.history], rtol=1e-6)
    np.testing.assert_allclose(weights(graph), weights(eager), rtol=1e-5, atol=1e-7)


@pytest.mark.gpu
@needs_gpu
def test_a_schedule_changes_the_rate_inside_the_graph():
    schedule = {"schedule": LinearScaling(base_batch_size=25, warmup_epochs=2.0)}  # a new rate every step
    graph = train("gpu", OPTIMIZERS["momentum"], epochs=4, **schedule)
    eager = train("gpu", OPTIMIZERS["momentum"], graph=False, epochs=4, **schedule)
    constant = train("gpu", OPTIMIZERS["momentum"], epochs=4)
    assert graph._graph.launches > 0
    np.testing.assert_allclose(weights(graph), weights(eager), rtol=1e-5, atol=1e-7)
    assert not np.allclose(weights(graph), weights(constant), rtol=1e-3)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_fused_updates_match_numpy(name):
    gpu, cpu = (train(device, OPTIMIZERS[name], dtype="float64") for device in ("gpu", "cpu"))
    assert gpu.updater.fused and gpu._graph.launches > 0 and gpu.layers[1].bias_in_next
    np.testing.assert_allclose([h.loss for h in gpu.history], [h.loss for h in cpu.history], rtol=1e-10)
    np.testing.assert_allclose(weights(gpu), weights(cpu), rtol=1e-9, atol=1e-12)


class HostSync(Layer):
    """Says it is graph-safe but copies to the host: its capture fails."""

    graph_safe = True

    def forward(self, x, training=True):
        self.seen = float(x.sum())
        return x

    def backward(self, grad, need_input_grad=True):
        return grad


@pytest.mark.gpu
@needs_gpu
def test_fallbacks_on_the_gpu(monkeypatch, caplog):
    with caplog.at_level(logging.DEBUG, logger="diel.trainer"):
        dropout = train("gpu", OPTIMIZERS["sgd-wd"], layers=[Input(12), FullyConnected(8), Dropout(0.2),
                                                                FullyConnected(4), Output()])
    assert dropout._graph is None and "layer 2 (Dropout) is not graph-safe" in caplog.text
    monkeypatch.setenv(NO_GRAPH_ENV, "1")
    assert train("gpu", OPTIMIZERS["sgd-wd"])._graph is None
    monkeypatch.delenv(NO_GRAPH_ENV)
    layers = lambda: [Input(12), HostSync(), FullyConnected(8), Activation("tanh"), FullyConnected(4), Output()]
    failed, eager = train("gpu", OPTIMIZERS["adam"], layers=layers()), train("gpu", OPTIMIZERS["adam"], graph=False,
                                                                             layers=layers())
    assert len(failed._graph.failed) == 2 and failed._graph.launches == 0
    np.testing.assert_allclose(weights(failed), weights(eager), rtol=1e-6, atol=1e-7)


@pytest.mark.gpu
@needs_gpu
def test_replaced_optimizer_state_is_captured_again():
    """As examples/pbt does between fits: new momentum arrays, at new addresses."""
    runs = []
    for graph in (True, False):
        model = train("gpu", OPTIMIZERS["momentum"], graph=graph)
        model.optimizer.states = [{key: value * 0.5 for key, value in state.items()}
                                  for state in model.optimizer.states]
        x, y = synthetic(250, (12,), classes=4, seed=2)
        model.fit(x, y, epochs=3, batch_size=100)
        runs.append(model)
    assert runs[0]._graph.captures == 4 and runs[0]._graph.launches == 2 * (3 * 3 - 2)
    np.testing.assert_allclose(weights(runs[0]), weights(runs[1]), rtol=1e-5, atol=1e-7)


@pytest.mark.gpu
@needs_gpu
def test_momentum_switched_on_by_a_callback_is_captured_again():
    def momentum_after_first_epoch(stats, model):
        model.optimizer.momentum = 0.9

    runs = [train("gpu", lambda: SGD(0.05), graph=graph, epochs=4, callback=momentum_after_first_epoch)
            for graph in (True, False)]
    assert runs[0]._graph.captures == 3  # the full batch in epochs 1 and 2 (after the switch), the partial in 3
    np.testing.assert_allclose(weights(runs[0]), weights(runs[1]), rtol=1e-5, atol=1e-7)


def test_cublas_takes_row_major_arrays_and_their_transposes():
    from trainer.blas import _OP_N, _OP_T, _layout

    x = np.zeros((6, 4), np.float32)
    assert _layout(x) == (_OP_N, 4) and _layout(x.T) == (_OP_T, 4)
    assert _layout(x[:, :3]) == (_OP_N, 4) and _layout(x[:, :3].T) == (_OP_T, 4)
    assert _layout(x[::2]) == (_OP_N, 8) and _layout(x[:, ::2]) is None and _layout(np.zeros(3)) is None


@pytest.mark.gpu
@needs_gpu
def test_cublas_products_equal_cupys():
    from trainer.blas import cublas_problem, matmul

    cp = cupy_or_none()
    assert cublas_problem() is None
    rng = cp.random.default_rng(0)
    for dtype in (cp.float32, cp.float64):
        a, b = rng.standard_normal((7, 5), dtype=dtype), rng.standard_normal((5, 3), dtype=dtype)
        for left, right in ((a, b), (a.T.copy().T, b), (a, b.T.copy().T), (a[:, :4], b[:4]), (a[::2], b), (a[:, ::2], b[:3])):
            out = cp.empty((left.shape[0], right.shape[1]), dtype)
            matmul(cp, left, right, out)
            cp.testing.assert_allclose(out, left @ right, rtol=1e-5)
