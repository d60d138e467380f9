"""The training step as a CUDA graph: captured once per batch shape, then replayed.

At batch 100 a GPU step is a few dozen small kernels, and launching each from Python
costs more than running it. :class:`StepGraph` runs the device part of a step (forward,
loss, backward, update) eagerly the first time it sees a batch shape (kernels compile,
the buffers are made), captures it the second time into a CUDA graph, and from then on
launches that graph: one launch per step instead of one per operation.

What the graph may hold is decided by :func:`graph_blocker`; what it relies on:

* fixed addresses: the batch is gathered into the model's batch buffers before each
  launch, layers and losses write into cached buffers, and every temporary made while
  capturing comes from the graph's own memory pool, so no other array is ever given that
  memory (the step's temporaries are scratch that only the graph's own kernels touch);
* no numbers baked in that change between steps: the optimizer's per-step numbers (the
  learning rate a schedule sets, Adam's bias corrections) are copied into a device array
  before each launch (:meth:`trainer.update.Updater.prepare`) and read by its fused kernel;
* no host synchronisation and no Python branching on device values inside the step (a
  capture that tries one fails; that shape then runs eagerly, with a debug log line).

Everything runs on the graph's own stream while a ``fit`` uses it (:meth:`StepGraph.running`),
ordered after what the default stream did before and before what it does after.

With data parallelism the step is two graphs, each with its own key: forward and backward
up to the filled reduce buffer (:meth:`trainer.update.Updater.stage`), then the gradient
Allreduce, which NCCL or MPI runs outside any graph on that same stream, then the update
(:meth:`trainer.update.Updater.finish`); the model orders them (``_graphs_around_allreduce``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

__all__ = ["StepGraph", "CupyGraphOps", "graph_blocker", "NO_GRAPH_ENV"]

log = logging.getLogger("diel.trainer")

#: Set (to anything but empty or 0) to train eagerly on a GPU, whatever ``cuda_graph`` says.
NO_GRAPH_ENV = "DIEL_TRAINER_NO_GRAPH"


def graph_blocker(setting: bool, on_gpu: bool, device_memory: bool, mixed_precision: bool,
                  offload: bool, lars: bool, optimizer: Any, layers: Sequence[Any], loss: Any) -> str | None:
    """Why a ``fit`` with these settings cannot replay its step as CUDA graphs, or None
    when it can. Each reason is a part of the step that is decided on the host or changes
    from step to step. Data parallelism is none: its Allreduce runs between two graphs."""
    if not setting:
        return "cuda_graph is off"
    if os.environ.get(NO_GRAPH_ENV, "") not in ("", "0"):
        return f"{NO_GRAPH_ENV} is set"
    if not on_gpu:
        return "the model is on the CPU"
    if not device_memory:
        return "memory is not 'device' (managed types keep host copies in step)"
    if mixed_precision:
        return "mixed precision: an overflowing step is skipped by a check on the host"
    if offload:
        return "offload: activations move to host memory and back between the passes"
    if lars:
        return "LARS: the trust ratios are computed on the host"
    if optimizer.fused is None:
        return f"optimizer {type(optimizer).__name__} has no fused update reading its numbers from the device"
    for i, layer in enumerate(layers):
        if not layer.graph_safe:
            return f"layer {i} ({layer.describe()}) is not graph-safe"
    if not loss.graph_safe:
        return f"loss {type(loss).__name__} is not graph-safe"
    return None


class CupyGraphOps:
    """What :class:`StepGraph` needs from CuPy: its own non-blocking stream, its own memory
    pool, capture on that stream, and launches on it."""

    def __init__(self, cp: Any) -> None:
        self.cp = cp
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.pool = cp.cuda.MemoryPool()

    @contextmanager
    def private_memory(self) -> Iterator[None]:
        """New arrays come from the graph's pool while inside."""
        with self.cp.cuda.using_allocator(self.pool.malloc):
            yield

    @contextmanager
    def on_stream(self) -> Iterator[None]:
        """Run on the graph's stream, after the default stream's earlier work; the default
        stream's later work waits for it."""
        null = self.cp.cuda.Stream.null
        self.stream.wait_event(null.record())
        try:
            with self.stream:
                yield
        finally:
            null.wait_event(self.stream.record())

    def begin(self) -> None:
        self.stream.begin_capture()

    def end(self) -> Any:
        return self.stream.end_capture()

    def launch(self, graph: Any) -> None:
        graph.launch(self.stream)


_WARM = object()   # seen once (ran eagerly): capture on the next call
_EAGER = object()  # capture failed: always eager


class StepGraph:
    """Replays ``body()`` as one CUDA graph per key (the batch's shape and weight).

    ``ops`` is a :class:`CupyGraphOps` (tests pass a stand-in). ``captures`` and
    ``launches`` count graphs made and replays run; ``failed`` maps a key whose capture
    failed to the reason (that key then runs eagerly)."""

    def __init__(self, ops: Any) -> None:
        self.ops = ops
        self._entries: dict[Hashable, Any] = {}
        self.captures = 0
        self.launches = 0
        self.failed: dict[Hashable, str] = {}

    def forget(self) -> None:
        """Drop every captured graph (what they held was replaced): each shape warms up and
        is captured again."""
        self._entries.clear()
        self.failed.clear()

    def running(self) -> Any:
        """Context for a whole ``fit``: every step (and the eager work between) on the
        graph's stream."""
        return self.ops.on_stream()

    def run(self, key: Hashable, body: Callable[[], Any]) -> Any:
        """One step: ``body()``'s result, from a launch of the graph for ``key`` (the
        arrays it returned when captured, rewritten by each launch)."""
        entry = self._entries.get(key)
        if entry is _EAGER:
            return body()
        if entry is None:  # warm-up: kernels compile, buffers and the pool's blocks are made
            with self.ops.private_memory():
                result = body()
            self._entries[key] = _WARM
            return result
        if entry is _WARM:
            entry = self._capture(key, body)
            if entry is _EAGER:
                return body()
        graph, result = entry
        self.ops.launch(graph)
        self.launches += 1
        return result

    def _capture(self, key: Hashable, body: Callable[[], Any]) -> Any:
        with self.ops.private_memory():
            self.ops.begin()
            try:
                result = body()
            except Exception as e:  # a host sync or an unsupported call: this shape stays eager
                try:
                    self.ops.end()
                except Exception:  # noqa: S110 - the capture is invalid; its end says so again
                    pass
                return self._give_up(key, e)
            try:
                graph = self.ops.end()
            except Exception as e:  # the capture was invalidated by a call that did not raise
                return self._give_up(key, e)
        self.captures += 1
        self._entries[key] = (graph, result)
        return self._entries[key]

    def _give_up(self, key: Hashable, error: Exception) -> Any:
        self.failed[key] = f"{type(error).__name__}: {error}"
        log.debug("CUDA graph capture of the step %s failed, running it eagerly: %s", key, self.failed[key])
        self._entries[key] = _EAGER
        return _EAGER
