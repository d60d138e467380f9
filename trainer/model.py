"""NeuralNetwork: a sequence of layers, a loss and an optimizer, trained by mini-batch.

The hot loop keeps Python work and copies out of the way: batches are gathered by index
into one reused buffer (the data is shuffled by index once per epoch), layers write into
buffers they reuse, optimizers update in place, and on a GPU the loss is only brought to
the host every few batches.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from trainer.backend import Device, get_device, to_numpy
from trainer.errors import ConfigError, ShapeMismatchError, TrainingDiverged
from trainer.layers import Activation, Input, Layer
from trainer.losses import Loss, get_loss
from trainer.optimizers import Optimizer, get_optimizer
from trainer.results import Callback, EpochStats, FitResult, StopTraining

__all__ = ["NeuralNetwork", "DEFAULT_PARAMS"]

#: Settings a model accepts in ``params`` (MagmaDNN's nn_params), with their defaults.
DEFAULT_PARAMS: dict[str, Any] = {
    "device": "cpu",        # cpu, gpu, gpu:N or auto
    "dtype": "float32",     # float32 for training, float64 for gradient checks
    "gemm_dtype": "auto",   # auto: float16 GEMMs on tensor-core GPUs; or float16/float32/float64
    "batch_size": 100,      # default for fit/evaluate/predict
    "epochs": 1,            # default for fit
    "seed": 0,              # initial weights, shuffling and dropout
    "shuffle": True,        # reshuffle the training data each epoch
    "comm": None,           # an mpi4py communicator: data-parallel training over its ranks
    "check_every": None,    # batches between NaN checks (None: 1 on CPU, 50 on GPU)
}


class NeuralNetwork:
    """``NeuralNetwork(layers, loss, optimizer, params)``, built (shapes checked) at once.

    ``layers`` starts with an :class:`Input`; ``loss`` is a name (``cross_entropy``,
    ``mse``) or a :class:`Loss`; ``optimizer`` a name or an :class:`Optimizer`; ``params``
    overrides :data:`DEFAULT_PARAMS`. A layer that cannot take its input's shape raises
    :class:`ShapeMismatchError` naming its position and name.
    """

    def __init__(self, layers: Sequence[Layer], loss: str | Loss = "cross_entropy",
                 optimizer: str | Optimizer = "sgd", params: dict[str, Any] | None = None) -> None:
        unknown = sorted(set(params or {}) - set(DEFAULT_PARAMS))
        if unknown:
            raise ConfigError(f"unknown model setting(s) {', '.join(unknown)}; "
                              f"known: {', '.join(DEFAULT_PARAMS)}")
        self.params = {**DEFAULT_PARAMS, **(params or {})}
        self.layers = list(layers)
        if not self.layers or not isinstance(self.layers[0], Input):
            raise ConfigError("the first layer must be an Input layer giving the sample shape")
        self.loss = get_loss(loss)
        self.optimizer = get_optimizer(optimizer)
        self.device: Device = get_device(self.params["device"])
        self.device.activate()
        self.xp = self.device.xp
        self.dtype = np.dtype(self.params["dtype"])
        if self.dtype.kind != "f":
            raise ConfigError(f"dtype must be a float type, got {self.dtype}")
        self.comm = self.params["comm"]
        self._rng = np.random.default_rng(self.params["seed"])
        self._build()

    # -- building --------------------------------------------------------------------------
    def _gemm_dtype(self) -> np.dtype | None:
        choice = self.params["gemm_dtype"]
        if choice == "auto":
            fp16 = self.device.tensor_cores and self.dtype == np.float32
            return np.dtype(np.float16) if fp16 else None
        return np.dtype(choice)

    def _build(self) -> None:
        shape: tuple[int, ...] = ()
        gemm_dtype = self._gemm_dtype()
        for i, layer in enumerate(self.layers):
            if i and isinstance(layer, Input):
                raise ConfigError(f"layer {i} ({layer.describe()}): only the first layer may be an Input")
            try:
                shape = layer.setup(shape, self.xp, self.dtype, self._rng, gemm_dtype)
            except ShapeMismatchError as e:
                raise ShapeMismatchError(f"layer {i} ({layer.describe()}): {e}") from None
        self.input_shape: tuple[int, ...] = self.layers[0].output_shape
        self.output_shape: tuple[int, ...] = shape
        last = self.layers[-1]
        self._fused = (self.loss.fuses_softmax and isinstance(last, Activation)
                       and last.function == "softmax")
        self._train_layers = self.layers[:-1] if self._fused else self.layers
        trainable = [i for i, layer in enumerate(self._train_layers) if layer.params]
        self._first_trainable = trainable[0] if trainable else len(self._train_layers)
        self._params = [layer.params[k] for layer in self.layers for k in layer.params]
        self._layer_slots = [([layer.params[k] for k in layer.params], [layer.grads[k] for k in layer.params])
                             for layer in self.layers]
        counts = [len(layer.params) for layer in self.layers]
        self._param_index = [sum(counts[:i]) for i in range(len(counts))]

    def summary(self) -> str:
        """One line per layer: position, kind and name, output shape, parameter count."""
        lines = []
        for i, layer in enumerate(self.layers):
            count = sum(int(np.prod(p.shape)) for p in layer.params.values())
            lines.append(f"{i:3d}  {layer.describe():<32} {str(layer.output_shape):<16} {count}")
        total = sum(int(np.prod(p.shape)) for p in self._params)
        return "\n".join(lines + [f"total parameters: {total}"])

    # -- data ------------------------------------------------------------------------------
    def _check_data(self, x: Any, y: Any | None, what: str) -> tuple[Any, Any]:
        if tuple(x.shape[1:]) != self.input_shape:
            raise ShapeMismatchError(f"{what} samples have shape {tuple(x.shape[1:])}, "
                                     f"but layer 0 ({self.layers[0].describe()}) expects {self.input_shape}")
        if y is not None and len(y) != len(x):
            raise ValueError(f"{what}: {len(x)} samples but {len(y)} targets")
        if len(x) == 0:
            raise ValueError(f"{what}: no samples")
        xs = self.xp.asarray(x, dtype=self.dtype)
        ys = None if y is None else self.xp.asarray(y)
        return xs, ys

    # -- one batch -------------------------------------------------------------------------
    def _forward(self, x: Any, layers: Sequence[Layer], training: bool) -> Any:
        for layer in layers:
            x = layer.forward(x, training)
        return x

    def _train_batch(self, x: Any, y: Any) -> tuple[Any, Any]:
        out = self._forward(x, self._train_layers, True)
        loss = self.loss.forward(out, y)
        correct = self._count_correct(out, y)
        grad = self.loss.backward()
        if self.optimizer.grad_scale != 1.0:
            grad = grad * self.optimizer.grad_scale
        first = self._first_trainable
        for i in range(len(self._train_layers) - 1, first - 1, -1):
            layer = self._train_layers[i]
            grad = layer.backward(grad, need_input_grad=i > first)
            if layer.params:  # update now, while this layer's weights and gradients are in cache
                params, grads = self._layer_slots[i]
                if self.comm is not None and self.comm.Get_size() > 1:
                    self._allreduce(grads)
                self.optimizer.step(params, grads, first=self._param_index[i])
        return loss, correct

    def _count_correct(self, out: Any, y: Any) -> Any:
        if out.ndim != 2 or out.shape[1] < 2:
            return 0
        labels = y if y.ndim == 1 else y.argmax(axis=1)
        return (out.argmax(axis=1) == labels).sum()

    def _allreduce(self, grads: list[Any]) -> None:
        """Average gradients over ``comm`` (data parallelism: each rank has a data shard)."""
        from mpi4py import MPI  # noqa: PLC0415 - only data-parallel runs need MPI here

        size = self.comm.Get_size()
        for g in grads:
            host = to_numpy(g) if self.device.is_gpu else g
            self.comm.Allreduce(MPI.IN_PLACE, host, op=MPI.SUM)
            if self.device.is_gpu:
                g[...] = self.xp.asarray(host)
            g /= size

    # -- public API ------------------------------------------------------------------------
    def fit(self, x: Any, y: Any, epochs: int | None = None, batch_size: int | None = None,
            validation: tuple[Any, Any] | None = None,
            callback: Callback | Sequence[Callback] | None = None) -> FitResult:
        """Train for ``epochs`` over ``(x, y)`` in mini-batches and return a :class:`FitResult`.

        After each epoch every callback is called as ``callback(stats, model)``; returning
        True or raising :class:`StopTraining` stops training there (``stopped_early``).
        With ``comm`` set, each rank trains on its share ``x[rank::size]`` and gradients are
        averaged; rank 0's callback decision is used by all ranks. A NaN or infinite loss
        raises :class:`TrainingDiverged`.
        """
        epochs = int(self.params["epochs"] if epochs is None else epochs)
        batch_size = int(self.params["batch_size"] if batch_size is None else batch_size)
        if epochs < 0 or batch_size <= 0:
            raise ConfigError(f"epochs must be >= 0 and batch_size > 0, got {epochs}, {batch_size}")
        if self.comm is not None and self.comm.Get_size() > 1:
            x, y = x[self.comm.Get_rank()::self.comm.Get_size()], y[self.comm.Get_rank()::self.comm.Get_size()]
        xs, ys = self._check_data(x, y, "training")
        callbacks = [] if callback is None else [callback] if callable(callback) else list(callback)
        result = FitResult(0.0, math.nan, math.nan, None, None, 0)
        start = time.perf_counter()
        for epoch in range(epochs):
            with np.errstate(over="ignore", invalid="ignore"):  # divergence is caught below, by value
                stats = self._run_epoch(epoch, xs, ys, batch_size)
            if validation is not None:
                stats.val_loss, stats.val_accuracy = self.evaluate(*validation, batch_size=max(batch_size, 1000))
            stats.time = time.perf_counter() - start - sum(h.time for h in result.history)
            result.history.append(stats)
            result.epochs = epoch + 1
            if self._should_stop(stats, callbacks):
                result.stopped_early = epoch + 1 < epochs
                break
        result.time = time.perf_counter() - start
        if result.history:
            last = result.history[-1]
            result.loss, result.accuracy = last.loss, last.accuracy
            result.val_loss, result.val_accuracy = last.val_loss, last.val_accuracy
        return result

    def _should_stop(self, stats: EpochStats, callbacks: list[Callback]) -> bool:
        stop = False
        for cb in callbacks:
            try:
                stop = bool(cb(stats, self)) or stop
            except StopTraining:
                stop = True
        if self.comm is not None and self.comm.Get_size() > 1:
            stop = bool(self.comm.bcast(stop, root=0))
        return stop

    def _run_epoch(self, epoch: int, xs: Any, ys: Any, batch_size: int) -> EpochStats:
        xp, n = self.xp, len(xs)
        order = self._rng.permutation(n) if self.params["shuffle"] else np.arange(n)
        order = xp.asarray(order)
        check_every = self.params["check_every"] or (50 if self.device.is_gpu else 1)
        total_loss, total_correct, pending = 0.0, 0, 0.0
        batches = (n + batch_size - 1) // batch_size
        for b in range(batches):
            idx = order[b * batch_size:(b + 1) * batch_size]
            xb = xp.take(xs, idx, axis=0, out=self._batch_buffer(xs, len(idx)))
            yb = ys[idx]
            loss, correct = self._train_batch(xb, yb)
            pending = pending + loss * len(idx)
            total_correct = total_correct + correct
            if (b + 1) % check_every == 0 or b + 1 == batches:
                value = float(pending)
                if not math.isfinite(value):
                    raise TrainingDiverged(f"loss became {value} in epoch {epoch}, batch {b} "
                                           f"(try a smaller learning rate)", epoch, b, value)
                total_loss, pending = total_loss + value, 0.0
        loss, accuracy = total_loss / n, float(total_correct) / n
        if self.comm is not None and self.comm.Get_size() > 1:
            size = self.comm.Get_size()
            loss, accuracy = self.comm.allreduce(loss) / size, self.comm.allreduce(accuracy) / size
        return EpochStats(epoch, loss, accuracy)

    def _batch_buffer(self, xs: Any, rows: int) -> Any:
        buf = getattr(self, "_xbuf", None)
        if buf is None or buf.shape[0] != rows:
            buf = self._xbuf = self.xp.empty((rows, *xs.shape[1:]), dtype=xs.dtype)
        return buf

    def predict(self, x: Any, batch_size: int | None = None) -> np.ndarray:
        """Network outputs for ``x`` (class probabilities for a softmax output), as NumPy."""
        xs, _ = self._check_data(x, None, "prediction")
        bs = int(batch_size or max(self.params["batch_size"], 1000))
        parts = [to_numpy(self._forward(xs[i:i + bs], self.layers, False)).copy() for i in range(0, len(xs), bs)]
        return np.concatenate(parts)

    def evaluate(self, x: Any, y: Any, batch_size: int | None = None) -> tuple[float, float]:
        """``(mean loss, accuracy)`` on ``(x, y)`` without training (dropout off)."""
        xs, ys = self._check_data(x, y, "evaluation")
        bs = int(batch_size or max(self.params["batch_size"], 1000))
        layers = self._train_layers
        total_loss, correct = 0.0, 0
        for i in range(0, len(xs), bs):
            out = self._forward(xs[i:i + bs], layers, False)
            total_loss += float(self.loss.forward(out, ys[i:i + bs])) * len(out)
            correct += int(self._count_correct(out, ys[i:i + bs]))
        return total_loss / len(xs), correct / len(xs)

