"""NeuralNetwork: a sequence of layers, a loss and an optimizer, trained by mini-batch.

The hot loop keeps Python work and copies out of the way: batches are gathered by index
into one reused buffer (the data is shuffled by index once per epoch), layers write into
buffers they reuse, optimizers update in place, and on a GPU the loss is only brought to
the host every few batches.

All parameters live in one flat buffer and all gradients in another (each layer's arrays
are views into them), so data-parallel training reduces ONE buffer per step, mixed
precision casts its float32 master weights back in one pass, and LARS reads whole layers.
A plain single-rank run updates each layer right after its backward pass (while its
arrays are in cache); data parallelism, mixed precision and LARS need every gradient
first, so they run the whole backward pass, then :meth:`NeuralNetwork._apply`.
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
from trainer.offload import CupyOps, Offloader
from trainer.optimizers import Optimizer, get_optimizer
from trainer.parallel import EXTRA_SLOTS, GradientReducer, fuse, slice_bounds
from trainer.precision import LossScaler, half_dtype
from trainer.results import Callback, EpochStats, FitResult, StopTraining
from trainer.schedules import Plan, build_schedule, trust_ratio

__all__ = ["NeuralNetwork", "DEFAULT_PARAMS"]

#: Settings a model accepts in ``params`` (MagmaDNN's nn_params), with their defaults.
DEFAULT_PARAMS: dict[str, Any] = {
    "device": "cpu",        # cpu, gpu, gpu:N or auto
    "dtype": "float32",     # float32 for training, float64 for gradient checks
    "gemm_dtype": None,     # None: GEMMs in dtype; float16 only when asked (mixed_precision scales the loss)
    "batch_size": 100,      # default for fit/evaluate/predict (with comm: the GLOBAL batch)
    "epochs": 1,            # default for fit
    "seed": 0,              # initial weights, shuffling and dropout
    "shuffle": True,        # reshuffle the training data each epoch
    "comm": None,           # an mpi4py communicator: data-parallel, each rank computes a slice of each batch
    "check_every": None,    # batches between NaN checks (None: 1 on CPU, 50 on GPU)
    "schedule": None,       # None/constant, linear, date, or a trainer.schedules.Schedule
    "offload": False,       # GPU: saved activations wait in pinned host memory until backward
    "mixed_precision": False,  # True/float16: float16 storage and GEMMs, float32 master weights
    "loss_scale": 2.0 ** 15,   # mixed precision: initial dynamic loss scale
    "scale_window": 200,       # mixed precision: good steps before the loss scale doubles
}


class NeuralNetwork:
    """``NeuralNetwork(layers, loss, optimizer, params)``, built (shapes checked) at once.

    ``layers`` starts with an :class:`Input`; ``loss`` is a name (``cross_entropy``,
    ``mse``) or a :class:`Loss`; ``optimizer`` a name or an :class:`Optimizer`; ``params``
    overrides :data:`DEFAULT_PARAMS`. A layer that cannot take its input's shape raises
    :class:`ShapeMismatchError` naming its position and name. With ``comm`` every rank of
    the communicator must build the model (it agrees a seed and sets up the Allreduce).
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
        self._base_lr = self.optimizer.lr  # a schedule's base_lr when it names none
        self.schedule = build_schedule({"schedule": self.params["schedule"]})
        self.device: Device = get_device(self.params["device"])
        self.device.activate()
        self.xp = self.device.xp
        self.dtype = np.dtype(self.params["dtype"])
        if self.dtype.kind != "f":
            raise ConfigError(f"dtype must be a float type, got {self.dtype}")
        self.half = half_dtype(self.params["mixed_precision"])
        if self.half is not None and self.dtype != np.float32:
            raise ConfigError(f"mixed_precision keeps float32 master weights: dtype must be float32, got {self.dtype}")
        self.compute_dtype = self.half or self.dtype
        self.scaler = (LossScaler(self.params["loss_scale"], self.params["scale_window"])
                       if self.half is not None else None)
        if not isinstance(self.params["offload"], bool):
            raise ConfigError(f"offload must be true or false, got {self.params['offload']!r}")
        self.comm = self.params["comm"]
        self.rank, self.world = (self.comm.Get_rank(), self.comm.Get_size()) if self.comm is not None else (0, 1)
        self._seed_streams(self.params["seed"])
        self._plan: Plan | None = None
        self._step = 0
        self.trust_ratios: list[float] = []  # LARS: the last step's ratio per trainable layer
        self._build()

    # -- building --------------------------------------------------------------------------
    def _seed_streams(self, seed: int | None) -> None:
        """Independent streams from one seed: weights and shuffling the same on every rank
        (rank 0's seed when unset), dropout masks different per rank."""
        if self.world > 1:
            seed = self.comm.bcast(np.random.SeedSequence(seed).entropy, root=0)
        root = np.random.SeedSequence(seed)
        init, shuffle, dropout = root.spawn(3)
        self._rng = np.random.default_rng(init)
        self._shuffle_rng = np.random.default_rng(shuffle)
        self._dropout_rng = np.random.default_rng(dropout.spawn(self.world)[self.rank])

    def _gemm_dtype(self) -> np.dtype | None:
        """The GEMMs' dtype when the user asked for one other than the storage dtype.

        Never float16 by default: float16 products without loss scaling can underflow
        the gradients, so lower precision is either asked for here explicitly or comes
        with ``mixed_precision`` (which scales the loss)."""
        choice = self.params["gemm_dtype"]
        if self.half is not None or choice is None:
            return None  # mixed precision: the layers already compute in float16
        if choice not in ("float16", "float32", "float64"):
            raise ConfigError(f"gemm_dtype must be None, float16, float32 or float64, got {choice!r}")
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
            layer.rng = self._dropout_rng
        self.input_shape: tuple[int, ...] = self.layers[0].output_shape
        self.output_shape: tuple[int, ...] = shape
        last = self.layers[-1]
        self._fused = (self.loss.fuses_softmax and isinstance(last, Activation)
                       and last.function == "softmax")
        self._train_layers = self.layers[:-1] if self._fused else self.layers
        self._trainable = [i for i, layer in enumerate(self._train_layers) if layer.params]
        self._first_trainable = self._trainable[0] if self._trainable else len(self._train_layers)
        self._flatten()
        counts = [len(layer.params) for layer in self.layers]
        self._param_index = [sum(counts[:i]) for i in range(len(counts))]
        self.reducer = (GradientReducer(self.comm, self._reduce_buffer, self.device.is_gpu)
                        if self.world > 1 else None)
        self._offloader: Offloader | None = None
        if self.params["offload"] and self.device.is_gpu:  # on the CPU there is nowhere to offload to
            self._offloader = Offloader(self._train_layers, CupyOps(self.xp))
            for layer in self.layers:
                layer.cache_buffers = False

    def _flatten(self) -> None:
        """Move every parameter and gradient into one flat buffer each (the layers keep
        views); with mixed precision the layers get float16 copies of float32 masters."""
        slots = [(layer, key) for layer in self.layers for key in layer.params]
        values = [layer.params[key] for layer, key in slots]
        zeros = [layer.grads[key] for layer, key in slots]
        extra = 0 if self.half is not None else EXTRA_SLOTS
        self._flat_params, params = fuse(values, self.xp, self.compute_dtype)
        self._flat_grads, grads = fuse(zeros, self.xp, self.compute_dtype, extra)
        for (layer, key), param, grad in zip(slots, params, grads):
            layer.params[key], layer.grads[key] = param, grad
        self._params = params
        self._n_params = sum(int(p.size) for p in params)
        step_params, step_grads = params, grads
        if self.half is not None:
            self._master, step_params = fuse(values, self.xp, np.float32)
            self._reduce_buffer, step_grads = fuse(zeros, self.xp, np.float32, EXTRA_SLOTS)
            for layer in self.layers:
                layer.dtype = self.half
                layer._buffers.clear()
        else:
            self._reduce_buffer = self._flat_grads
        slots_by_layer, at = [], 0
        for layer in self.layers:
            count = len(layer.params)
            slots_by_layer.append((step_params[at:at + count], step_grads[at:at + count]))
            at += count
        self._layer_slots = slots_by_layer

    def summary(self) -> str:
        """One line per layer: position, kind and name, output shape, parameter count."""
        lines = []
        for i, layer in enumerate(self.layers):
            count = sum(int(np.prod(p.shape)) for p in layer.params.values())
            lines.append(f"{i:3d}  {layer.describe():<32} {str(layer.output_shape):<16} {count}")
        return "\n".join(lines + [f"total parameters: {self._n_params}"])

    @property
    def allreduce_seconds(self) -> float:
        """Seconds spent in the gradient Allreduce so far (0 on a single rank)."""
        return self.reducer.seconds if self.reducer is not None else 0.0

    # -- data ------------------------------------------------------------------------------
    def _check_data(self, x: Any, y: Any | None, what: str) -> tuple[Any, Any]:
        if tuple(x.shape[1:]) != self.input_shape:
            raise ShapeMismatchError(f"{what} samples have shape {tuple(x.shape[1:])}, "
                                     f"but layer 0 ({self.layers[0].describe()}) expects {self.input_shape}")
        if y is not None and len(y) != len(x):
            raise ValueError(f"{what}: {len(x)} samples but {len(y)} targets")
        if len(x) == 0:
            raise ValueError(f"{what}: no samples")
        xs = self.xp.asarray(x, dtype=self.compute_dtype)
        ys = None if y is None else self.xp.asarray(y)
        return xs, ys

    # -- one batch -------------------------------------------------------------------------
    def _forward(self, x: Any, layers: Sequence[Layer], training: bool) -> Any:
        offload = self._offloader if training else None
        for i, layer in enumerate(layers):
            x = layer.forward(x, training)
            if offload is not None:
                offload.after_forward(i)
        return x if self.half is None else x.astype(np.float32)  # losses and outputs in float32

    def _backward(self, grad: Any, update: bool) -> None:
        first, offload = self._first_trainable, self._offloader
        for i in range(len(self._train_layers) - 1, first - 1, -1):
            layer = self._train_layers[i]
            if offload is not None:
                offload.before_backward(i)
            grad = layer.backward(grad, need_input_grad=i > first)
            if update and layer.params:  # update now, while this layer's weights and gradients are in cache
                params, grads = self._layer_slots[i]
                self.optimizer.step(params, grads, first=self._param_index[i])

    def _train_batch(self, x: Any, y: Any, weight: float) -> tuple[Any, Any]:
        """One step on this rank's slice ``x`` (None when empty) of the global batch, which
        is the fraction ``weight`` of it; returns the global batch's (loss sum, correct)."""
        step = self._step
        self._step += 1
        if self._plan is not None:
            self.optimizer.lr = self._plan.lr(step)
        if x is None:
            self._flat_grads[...] = 0
            loss_sum, correct = 0.0, 0
        else:
            out = self._forward(x, self._train_layers, True)
            loss = self.loss.forward(out, y)
            correct = self._count_correct(out, y)
            grad = self.loss.backward()
            # weight makes the ranks' summed gradients the full-batch mean gradient
            factor = weight * self.optimizer.grad_scale * (self.scaler.scale if self.scaler else 1.0)
            if factor != 1.0:
                grad *= factor
            if self.half is not None:
                grad = grad.astype(self.half)
            self._backward(grad, update=self._stepwise)
            loss_sum = loss * len(x)
        if self._stepwise:
            return loss_sum, correct
        return self._apply(step, loss_sum, correct)

    def _apply(self, step: int, loss_sum: Any, correct: Any) -> tuple[Any, Any]:
        """Sum gradients, loss and count over the ranks (one Allreduce), then update every
        layer: unscaled and skipped on overflow (mixed precision), LARS-scaled (DATE)."""
        buf, n = self._reduce_buffer, self._n_params
        if self.half is not None:
            self.xp.multiply(self._flat_grads, 1.0 / self.scaler.scale, out=buf[:n], dtype=np.float32)
        buf[n], buf[n + 1] = loss_sum, correct
        if self.reducer is not None:
            self.reducer.allreduce()
        totals = buf[n:].copy()
        if self.scaler is not None and not self.scaler.update(math.isfinite(float(buf[:n].sum()))):
            return totals[0], totals[1]  # overflow: skip this step, the scale was halved
        plan = self._plan
        limits = plan.trust_limits(step) if plan is not None and plan.lars else None
        ratios = []
        for i in self._trainable:
            params, grads = self._layer_slots[i]
            scale = 1.0
            if limits is not None:
                scale = self._trust(params, grads, limits)
                ratios.append(scale)
            self.optimizer.step(params, grads, first=self._param_index[i], lr_scale=scale)
        self.trust_ratios = ratios
        if self.half is not None:
            self._flat_params[...] = self._master
        return totals[0], totals[1]

    def _trust(self, params: list[Any], grads: list[Any], limits: tuple[float, float]) -> float:
        """One layer's LARS trust ratio from its weight and true-gradient norms."""
        xp = self.xp
        w = math.sqrt(sum(float(xp.vdot(p.ravel(), p.ravel())) for p in params))
        g = math.sqrt(sum(float(xp.vdot(d.ravel(), d.ravel())) for d in grads)) / self.optimizer.grad_scale
        return trust_ratio(w, g, self.optimizer.weight_decay, self._plan.trust_coefficient, limits)

    def _count_correct(self, out: Any, y: Any) -> Any:
        if out.ndim != 2 or out.shape[1] < 2:
            return 0
        labels = y if y.ndim == 1 else y.argmax(axis=1)
        return (out.argmax(axis=1) == labels).sum()

    # -- public API ------------------------------------------------------------------------
    def fit(self, x: Any, y: Any, epochs: int | None = None, batch_size: int | None = None,
            validation: tuple[Any, Any] | None = None,
            callback: Callback | Sequence[Callback] | None = None) -> FitResult:
        """Train for ``epochs`` over ``(x, y)`` in mini-batches and return a :class:`FitResult`.

        After each epoch every callback is called as ``callback(stats, model)``; returning
        True or raising :class:`StopTraining` stops training there (``stopped_early``).
        With ``comm`` set, every rank passes the same data; all ranks shuffle alike and take
        the same global batch of ``batch_size`` rows, each computes its slice of it, and one
        Allreduce per step sums the gradients, so the result is that of one rank on the
        full batch; rank 0's callback decision is used by all ranks. A NaN or infinite loss
        raises :class:`TrainingDiverged` (on every rank at the same step).
        """
        epochs = int(self.params["epochs"] if epochs is None else epochs)
        batch_size = int(self.params["batch_size"] if batch_size is None else batch_size)
        if epochs < 0 or batch_size <= 0:
            raise ConfigError(f"epochs must be >= 0 and batch_size > 0, got {epochs}, {batch_size}")
        xs, ys = self._check_data(x, y, "training")
        steps_per_epoch = (len(xs) + batch_size - 1) // batch_size
        self._plan = (self.schedule.plan(batch_size, steps_per_epoch, epochs, self._base_lr)
                      if self.schedule is not None else None)
        self._stepwise = (self.world == 1 and self.half is None
                          and not (self._plan is not None and self._plan.lars))
        self._step = 0
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
        if self.world > 1:
            stop = bool(self.comm.bcast(stop, root=0))
        return stop

    def _run_epoch(self, epoch: int, xs: Any, ys: Any, batch_size: int) -> EpochStats:
        xp, n = self.xp, len(xs)
        order = self._shuffle_rng.permutation(n) if self.params["shuffle"] else np.arange(n)
        order = xp.asarray(order)
        check_every = self.params["check_every"] or (50 if self.device.is_gpu else 1)
        total_loss, total_correct, pending = 0.0, 0, 0.0
        batches = (n + batch_size - 1) // batch_size
        for b in range(batches):
            start, stop = b * batch_size, min(n, (b + 1) * batch_size)
            lo, hi = slice_bounds(stop - start, self.rank, self.world)
            xb = yb = None
            if hi > lo:
                idx = order[start + lo:start + hi]
                xb = xp.take(xs, idx, axis=0, out=self._batch_buffer(xs, hi - lo))
                yb = ys[idx]
            loss_sum, correct = self._train_batch(xb, yb, (hi - lo) / (stop - start))
            pending = pending + loss_sum
            total_correct = total_correct + correct
            if (b + 1) % check_every == 0 or b + 1 == batches:
                value = float(pending)  # after the Allreduce: the same value on every rank
                if not math.isfinite(value):
                    raise TrainingDiverged(f"loss became {value} in epoch {epoch}, batch {b} "
                                           f"(try a smaller learning rate)", epoch, b, value)
                total_loss, pending = total_loss + value, 0.0
        return EpochStats(epoch, total_loss / n, float(total_correct) / n)

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
