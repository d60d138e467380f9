"""NeuralNetwork: a sequence of layers, a loss and an optimizer, trained by mini-batch.

The model builds the network (shapes checked, parameters fused by :class:`~trainer.update.Updater`)
and runs the loop; the update pipeline after each backward pass (Allreduce, loss-scale
unscaling and overflow skip, LARS, the optimizer step, the master copy) is
:mod:`trainer.update`, and which rows of each global batch a rank computes is
:mod:`trainer.slicing`. Every array it trains with comes from one
:class:`~trainer.allocator.Allocator`, so the ``memory`` setting decides where parameters,
gradients, optimizer state and activations live.

The hot loop keeps Python work and copies out of the way: batches are gathered by index
into reused buffers (the data is shuffled by index once per epoch), layers write into
buffers they reuse, optimizers update in place, and on a GPU the loss is only brought to
the host every few batches. A plain single-rank run updates each layer right after its
backward pass (while its arrays are in cache); data parallelism, mixed precision and LARS
need every gradient first, so they run the whole backward pass, then the pipeline.

On a GPU the step's device work is captured as a CUDA graph and replayed (one launch per
step instead of one per operation; with data parallelism, two graphs around the
Allreduce) wherever :func:`~trainer.graph.graph_blocker` allows;
``cuda_graph: false`` or ``DIEL_TRAINER_NO_GRAPH=1`` keeps every step eager.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any

import numpy as np

from trainer.allocator import BufferCache, model_allocator
from trainer.backend import Device, get_device, to_numpy
from trainer.errors import ConfigError, ShapeMismatchError, TrainingDiverged
from trainer.graph import CupyGraphOps, StepGraph, graph_blocker, log
from trainer.layers import Activation, Input, Layer
from trainer.layers.activation import fuse_bias
from trainer.losses import Loss, get_loss
from trainer.memory import MemoryType
from trainer.offload import CupyOffloadOps, Offloader
from trainer.optimizers import Optimizer, get_optimizer
from trainer.parallel import GradientReducer
from trainer.precision import LossScaler, half_dtype
from trainer.results import Callback, EpochStats, FitResult, StopTraining
from trainer.schedules import Plan, build_schedule
from trainer.slicing import rank_slices
from trainer.update import Updater

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
    "memory": None,         # host, device, managed, cuda_managed (None: host on CPU, device on GPU)
    "mixed_precision": False,  # True/float16: float16 storage and GEMMs, float32 master weights
    "loss_scale": 2.0 ** 15,   # mixed precision: initial dynamic loss scale
    "scale_window": 200,       # mixed precision: good steps before the loss scale doubles
    "cuda_graph": True,     # GPU: replay the training step as a CUDA graph where it can (trainer.graph)
}


class NeuralNetwork(BufferCache):
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
        self.memory = model_allocator(self.params["memory"], self.device.is_gpu, self.device.index)
        self.xp = self.memory.xp
        self.dtype = np.dtype(self.params["dtype"])
        if self.dtype.kind != "f":
            raise ConfigError(f"dtype must be a float type, got {self.dtype}")
        self.half = half_dtype(self.params["mixed_precision"])
        if self.half is not None and self.dtype != np.float32:
            raise ConfigError(f"mixed_precision keeps float32 master weights: dtype must be float32, got {self.dtype}")
        self.compute_dtype = self.half or self.dtype
        self.scaler = (LossScaler(self.params["loss_scale"], self.params["scale_window"])
                       if self.half is not None else None)
        for key in ("offload", "cuda_graph"):
            if not isinstance(self.params[key], bool):
                raise ConfigError(f"{key} must be true or false, got {self.params[key]!r}")
        if self.params["offload"] and self.device.is_gpu and self.memory.mem_type is not MemoryType.DEVICE:
            raise ConfigError(f"offload moves activations from device memory to pinned host memory: "
                              f"it needs memory 'device', not {self.memory.mem_type.value!r}")
        self.comm = self.params["comm"]
        self.rank, self.world = (self.comm.Get_rank(), self.comm.Get_size()) if self.comm is not None else (0, 1)
        self._seed_streams(self.params["seed"])
        self._plan: Plan | None = None
        self._step = 0
        self._graph: StepGraph | None = None  # made on the first fit that can use it, kept after
        self._graph_holds: tuple = ()  # what its captures hold besides the model's buffers
        self._use_graph = False
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
                shape = layer.setup(shape, self.xp, self.dtype, self._rng, gemm_dtype, self.memory)
            except ShapeMismatchError as e:
                raise ShapeMismatchError(f"layer {i} ({layer.describe()}): {e}") from None
            layer.rng = self._dropout_rng
        self.input_shape: tuple[int, ...] = self.layers[0].output_shape
        self.output_shape: tuple[int, ...] = shape
        last = self.layers[-1]
        self._fused = (self.loss.fuses_softmax and isinstance(last, Activation)
                       and last.function == "softmax")
        self._train_layers = self.layers[:-1] if self._fused else self.layers
        trainable = [i for i, layer in enumerate(self._train_layers) if layer.params]
        self._first_trainable = trainable[0] if trainable else len(self._train_layers)
        self.loss.memory = self.optimizer.memory = self.memory
        self.loss.clear_buffers()
        make_reducer = ((lambda buffer: GradientReducer(self.comm, buffer, self.device.is_gpu))
                        if self.world > 1 else None)
        self.updater = Updater(self.layers, trainable, self.optimizer, self.memory, self.compute_dtype,
                               self.half, self.scaler, make_reducer)
        if self.half is not None:  # the layers compute in float16 on the fused float16 copies
            for layer in self.layers:
                layer.dtype = self.half
                layer.clear_buffers()
        self._offloader: Offloader | None = None
        if self.params["offload"] and self.device.is_gpu:  # on the CPU there is nowhere to offload to
            self._offloader = Offloader(self._train_layers, CupyOffloadOps(self.xp, self.memory))
            for layer in self.layers:
                layer.cache_buffers = False
        if self.device.is_gpu:
            fuse_bias(self.layers)

    def summary(self) -> str:
        """One line per layer: position, kind and name, output shape, parameter count."""
        lines = []
        for i, layer in enumerate(self.layers):
            count = sum(int(np.prod(p.shape)) for p in layer.params.values())
            lines.append(f"{i:3d}  {layer.describe():<32} {str(layer.output_shape):<16} {count}")
        return "\n".join(lines + [f"total parameters: {self.updater.n_params}"])

    @property
    def reducer(self) -> GradientReducer | None:
        """The gradient Allreduce (None on a single rank)."""
        return self.updater.reducer

    @property
    def trust_ratios(self) -> list[float]:
        """LARS: the last step's trust ratio per trainable layer (empty without LARS)."""
        return self.updater.trust_ratios

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
        xs = self.memory.load(x, self.compute_dtype)
        if y is not None and not hasattr(y, "dtype"):
            y = np.asarray(y)
        ys = None if y is None else self.memory.load(y, y.dtype)
        return xs, ys

    # -- one batch -------------------------------------------------------------------------
    def _forward(self, x: Any, layers: Sequence[Layer], training: bool) -> Any:
        offload = self._offloader if training else None
        for i, layer in enumerate(layers):
            x = layer.forward(x, training)
            if offload is not None:
                offload.after_forward(i)
        if self.half is None:
            return x
        out = self.buffer("output.float32", x.shape, np.float32)  # losses and outputs in float32
        out[...] = x
        return out

    def _backward(self, grad: Any, update: bool) -> None:
        first, offload = self._first_trainable, self._offloader
        for i in range(len(self._train_layers) - 1, first - 1, -1):
            layer = self._train_layers[i]
            if offload is not None:
                offload.before_backward(i)
            grad = layer.backward(grad, need_input_grad=i > first)
            if offload is not None:
                offload.after_backward(i)
            if update and layer.params:  # update now, while this layer's weights and gradients are in cache
                self.updater.step_layer(i)

    def _train_batch(self, x: Any, y: Any, weight: float) -> tuple[Any, Any]:
        """One step on this rank's slice ``x`` (None when empty) of the global batch, which
        is the fraction ``weight`` of it; returns the global batch's (loss sum, correct)."""
        step = self._step
        self._step += 1
        if self._plan is not None:
            self.optimizer.lr = self._plan.lr(step)
        self.updater.prepare()  # a fused update's numbers for this step, on the device
        if self._use_graph and self.reducer is not None:
            return self._graphs_around_allreduce(step, x, y, weight)
        if self._use_graph and x is not None:
            return self._graph.run((x.shape, weight), lambda: self._device_step(step, x, y, weight))
        return self._device_step(step, x, y, weight)

    def _device_step(self, step: int, x: Any, y: Any, weight: float) -> tuple[Any, Any]:
        """The part of a step that runs on the device (what a CUDA graph captures on one rank)."""
        loss_sum, correct = self._gradients(x, y, weight)
        if self._stepwise:
            return loss_sum, correct
        return self.updater.apply(step, self._plan, loss_sum, correct)

    def _graphs_around_allreduce(self, step: int, x: Any, y: Any, weight: float) -> tuple[Any, Any]:
        """A data-parallel step on a GPU: one graph up to the filled reduce buffer, the
        Allreduce outside any graph, one graph for the update. All three run in order on
        the graph's stream (the current stream during a fit): NCCL enqueues on it, the MPI
        paths wait for it first, so the Allreduce reads the finished gradients and the
        update graph, launched after it on that stream, reads the reduced ones."""
        def gradients() -> None:
            self.updater.stage(*self._gradients(x, y, weight))

        if x is None:  # an empty slice of a small last batch: zeros, eagerly
            gradients()
        else:
            self._graph.run(("gradients", x.shape, weight), gradients)
        self.reducer.allreduce()
        return self._graph.run("update", lambda: self.updater.finish(step, self._plan))

    def _gradients(self, x: Any, y: Any, weight: float) -> tuple[Any, Any]:
        """Forward and backward on this rank's slice (None: empty, the gradients zeroed);
        its loss sum and correct count."""
        if x is None:
            self.updater.zero_grads()
            return 0.0, 0
        out = self._forward(x, self._train_layers, True)
        loss = self.loss.forward(out, y)
        correct = self._count_correct(out, y)
        grad = self.loss.backward()
        # weight makes the ranks' summed gradients the full-batch mean gradient
        factor = weight * self.updater.grad_scale * (self.scaler.scale if self.scaler else 1.0)
        if factor != 1.0:
            grad *= factor
        if self.half is not None:
            half = self.buffer("loss_grad.half", grad.shape, self.half)
            half[...] = grad
            grad = half
        self._backward(grad, update=self._stepwise)
        return loss * len(x), correct

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
        # CPU, one rank: each layer is updated right after its backward, while in cache; a GPU
        # does better with one update over the fused buffer (fewer kernel launches)
        lars = self._plan is not None and self._plan.lars
        self._stepwise = self.world == 1 and self.half is None and not self.device.is_gpu and not lars
        self.updater.fused = (self.device.is_gpu and self.half is None and not lars
                              and self.optimizer.fused is not None and self.optimizer.elementwise)
        self._use_graph = self._graph_allowed(lars)
        self._step = 0
        callbacks = [] if callback is None else [callback] if callable(callback) else list(callback)
        result = FitResult(0.0, math.nan, math.nan, None, None, 0)
        start = time.perf_counter()
        with self._graph.running() if self._use_graph else nullcontext():
            for epoch in range(epochs):
                if self._use_graph:
                    self._check_graph_holds()  # a callback may have replaced what it holds
                with np.errstate(over="ignore", invalid="ignore"):  # divergence is caught below, by value
                    stats = self._run_epoch(epoch, xs, ys, batch_size)
                if validation is not None:
                    stats.val_loss, stats.val_accuracy = self.evaluate(*validation,
                                                                       batch_size=max(batch_size, 1000))
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

    def _graph_allowed(self, lars: bool) -> bool:
        """Whether this fit replays its step as a CUDA graph (made on first use); when it
        cannot, the reason goes to the debug log."""
        why = graph_blocker(self.params["cuda_graph"], self.device.is_gpu,
                            self.memory.mem_type is MemoryType.DEVICE, self.half is not None,
                            self._offloader is not None, lars, self.optimizer, self._train_layers, self.loss)
        if why is not None:
            if self.device.is_gpu:
                log.debug("training step not captured as a CUDA graph: %s", why)
            return False
        if self._graph is None:
            self._graph = StepGraph(CupyGraphOps(self.xp))
        return True

    def _check_graph_holds(self) -> None:
        """Capture again when what the graphs hold besides the model's own buffers changed:
        the optimizer and its fused update's state arrays (replaced, as a checkpoint's
        restore does, or another kernel after a momentum change), or the loss."""
        state = self.updater.fused_state()
        holds = (id(self.updater.optimizer), self.optimizer.fused, id(self.loss),
                 tuple((key, state[key].data.ptr) for key in self.optimizer.fused_slots))
        if holds != self._graph_holds:
            self._graph.forget()
            self._graph_holds = holds

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
        for part in rank_slices(n, batch_size, self.rank, self.world):
            xb = yb = None
            if part.rows:
                idx = order[part.start:part.stop]
                xb = xp.take(xs, idx, axis=0, out=self.buffer("batch.x", (part.rows, *xs.shape[1:]), xs.dtype))
                yb = xp.take(ys, idx, axis=0, out=self.buffer("batch.y", (part.rows, *ys.shape[1:]), ys.dtype))
            loss_sum, correct = self._train_batch(xb, yb, part.weight)
            pending = pending + loss_sum
            total_correct = total_correct + correct
            b = part.batch
            if (b + 1) % check_every == 0 or b + 1 == batches:
                value = float(pending)  # after the Allreduce: the same value on every rank
                if not math.isfinite(value):
                    raise TrainingDiverged(f"loss became {value} in epoch {epoch}, batch {b} "
                                           f"(try a smaller learning rate)", epoch, b, value)
                total_loss, pending = total_loss + value, 0.0
        return EpochStats(epoch, total_loss / n, float(total_correct) / n)

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
