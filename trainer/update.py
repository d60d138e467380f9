"""The update half of a training step: fused parameter buffers and what happens to the
gradients after the backward pass.

:class:`Updater` owns the model's parameters and gradients: every layer's arrays become
views into one flat parameter buffer and one flat gradient buffer (made by the model's
allocator), so data parallelism reduces ONE buffer per step, mixed precision casts its
float32 master weights back in one pass, and LARS reads whole layers. After a backward
pass, :meth:`Updater.apply` runs the pipeline:

1. unscale: with mixed precision, the float16 gradients divided by the loss scale into
   the float32 reduce buffer;
2. reduce: one Allreduce over that buffer, whose two extra slots carry the step's loss
   sum and correct count (so every rank sees the same loss at the same step);
3. overflow check: with mixed precision a step whose gradients hold an inf or NaN is
   skipped and the loss scale halved;
4. LARS: each layer's trust ratio from its weight and true-gradient norms (one copy of
   all the norms to the host per step), clipped to the schedule's limits;
5. step: the optimizer updates each trainable layer at ``lr * ratio`` (without LARS, an
   elementwise optimizer updates the whole fused buffer in one call);
6. master copy: the float32 masters cast back into the float16 parameters.

A plain single-rank run skips all of this and steps each layer right after its own
backward pass (:meth:`Updater.step_layer`), while its arrays are in cache.

With :attr:`Updater.fused` (set by the model for a GPU run whose optimizer has a fused
update, without LARS or mixed precision), step 5 is the optimizer's one-kernel update of
the whole buffer, which reads the step's numbers from :attr:`Updater.numbers`, a device
array that :meth:`Updater.prepare` fills before each step; the gradients then arrive
unscaled (:attr:`Updater.grad_scale` is 1).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from trainer.allocator import Allocator
from trainer.backend import to_numpy
from trainer.optimizers import Optimizer
from trainer.parallel import EXTRA_SLOTS, fuse
from trainer.precision import LossScaler
from trainer.schedules import Plan, trust_ratio

__all__ = ["Updater", "FUSED_NUMBERS"]

#: Slots of the device array of a fused update's per-step numbers (the most any optimizer reads).
FUSED_NUMBERS = 8


class Updater:
    """Fuses ``layers``' parameters and gradients and updates them with ``optimizer``.

    ``trainable``: indices of the layers the optimizer steps (those with parameters);
    ``dtype``: the storage dtype of parameters and gradients (float16 with mixed
    precision); ``half``: that float16 dtype when mixed precision is on, with ``scaler``
    its loss scale; ``make_reducer(buffer)`` returns the object whose ``allreduce()`` sums
    ``buffer`` over the ranks in place (None on one rank).
    """

    def __init__(self, layers: Sequence[Any], trainable: Sequence[int], optimizer: Optimizer,
                 memory: Allocator, dtype: Any, half: np.dtype | None = None,
                 scaler: LossScaler | None = None,
                 make_reducer: Callable[[Any], Any] | None = None) -> None:
        self.layers, self.trainable, self.optimizer = list(layers), list(trainable), optimizer
        self.memory, self.half, self.scaler = memory, half, scaler
        self.xp = memory.xp
        self.trust_ratios: list[float] = []  # LARS: the last step's ratio per trainable layer
        self.fused = False  # the optimizer's fused update over the whole buffer (set per fit by the model)
        self.numbers: Any = None  # its per-step numbers on the device (made on first use)
        self._fuse(np.dtype(dtype))
        self.reducer = make_reducer(self.reduce_buffer) if make_reducer is not None else None
        counts = [len(layer.params) for layer in self.layers]
        self.param_index = [sum(counts[:i]) for i in range(len(counts))]

    def _flat(self, role: str, dtype: Any) -> Callable[[int, Any], Any]:
        return lambda size, _: self.memory.zeros(size, dtype, role, keep=True)

    def _fuse(self, dtype: np.dtype) -> None:
        """Move every parameter and gradient into one flat buffer each (the layers keep
        views); with mixed precision the layers get float16 copies of float32 masters."""
        slots = [(layer, key) for layer in self.layers for key in layer.params]
        values = [layer.params[key] for layer, key in slots]
        zeros = [layer.grads[key] for layer, key in slots]
        extra = 0 if self.half is not None else EXTRA_SLOTS
        self.flat_params, params = fuse(values, self._flat("param", dtype), dtype)
        self.flat_grads, grads = fuse(zeros, self._flat("grad", dtype), dtype, extra)
        for (layer, key), param, grad in zip(slots, params, grads):
            layer.params[key], layer.grads[key] = param, grad
        self.n_params = sum(int(p.size) for p in params)
        step_params, step_grads = params, grads
        self.master: Any = None
        if self.half is not None:
            self.master, step_params = fuse(values, self._flat("param", np.float32), np.float32)
            self.reduce_buffer, step_grads = fuse(zeros, self._flat("grad", np.float32), np.float32, EXTRA_SLOTS)
        else:
            self.reduce_buffer = self.flat_grads
        self.layer_slots, at = [], 0
        for layer in self.layers:
            count = len(layer.params)
            self.layer_slots.append((step_params[at:at + count], step_grads[at:at + count]))
            at += count
        # every parameter as one array, for an elementwise optimizer (its state after the per-layer slots)
        stepped = self.master if self.half is not None else self.flat_params
        self.flat_slot = ([stepped[:self.n_params]], [self.reduce_buffer[:self.n_params]], len(slots))

    @property
    def grad_scale(self) -> float:
        """Factor the model applies to the loss gradient: the optimizer's, except for a
        fused update, which takes the true gradient."""
        return 1.0 if self.fused else self.optimizer.grad_scale

    def prepare(self) -> None:
        """Before each step of a fused update: copy the step's numbers (the optimizer's
        :meth:`~trainer.optimizers.Optimizer.fused_numbers`) into :attr:`numbers`, a
        device array at a fixed address (a captured step reads them there)."""
        if not self.fused:
            return
        numbers = self.optimizer.fused_numbers(self.optimizer.state(self.flat_slot[2]))
        if len(numbers) > FUSED_NUMBERS:
            raise ValueError(f"{type(self.optimizer).__name__}.fused_numbers gave {len(numbers)} numbers; "
                             f"at most {FUSED_NUMBERS} fit")
        if self.numbers is None:
            self.numbers = self.memory.zeros(FUSED_NUMBERS, self.flat_params.dtype, "state", keep=True)
        host = np.zeros(FUSED_NUMBERS, self.numbers.dtype)
        host[:len(numbers)] = numbers
        self.numbers.set(host)

    def fused_state(self) -> dict[str, Any]:
        """The fused update's state dict, its arrays made now (so a captured step can hold
        their addresses; whoever replaces one makes the model capture again)."""
        params, _, first = self.flat_slot
        state = self.optimizer.state(first)
        for key in self.optimizer.fused_slots:
            self.optimizer.slot(state, key, params[0])
        return state

    def step_layer(self, index: int) -> None:
        """Update layer ``index`` alone from its gradients (the single-rank fast path)."""
        params, grads = self.layer_slots[index]
        self.optimizer.step(params, grads, first=self.param_index[index])

    def zero_grads(self) -> None:
        """Zero every gradient (a rank whose slice of the batch is empty adds nothing)."""
        self.flat_grads[...] = 0

    def apply(self, step: int, plan: Plan | None, loss_sum: Any, correct: Any) -> tuple[Any, Any]:
        """Run the pipeline for ``step`` (see the module's docstring) and return the loss
        sum and correct count over all ranks; ``plan`` gives LARS and its limits."""
        self.stage(loss_sum, correct)
        if self.reducer is not None:
            self.reducer.allreduce()
        return self.finish(step, plan)

    def stage(self, loss_sum: Any, correct: Any) -> None:
        """Step 1 and the reduce buffer's extra slots: what the Allreduce sums (the part
        of :meth:`apply` before it; a data-parallel CUDA graph ends here)."""
        buf, n = self.reduce_buffer, self.n_params
        if self.half is not None:
            buf[:n] = self.flat_grads  # cast in place: no float32 temporary of every gradient
            buf[:n] *= 1.0 / self.scaler.scale
        buf[n], buf[n + 1] = loss_sum, correct

    def finish(self, step: int, plan: Plan | None) -> tuple[Any, Any]:
        """Steps 3 to 6 on the reduced buffer (the part of :meth:`apply` after the
        Allreduce); the loss sum and correct count over all ranks."""
        buf, n = self.reduce_buffer, self.n_params
        totals = buf[n:].copy()
        if self.scaler is not None and not self.scaler.update(math.isfinite(float(buf[:n].sum()))):
            return totals[0], totals[1]  # overflow: skip this step, the scale was halved
        lars = plan is not None and plan.lars
        ratios = self._trust_ratios(plan, plan.trust_limits(step)) if lars else None
        if ratios is None and self.fused:
            params, grads, first = self.flat_slot
            self.optimizer.step_fused(params[0], grads[0], self.optimizer.state(first), self.numbers)
        elif ratios is None and self.optimizer.elementwise:
            params, grads, first = self.flat_slot
            self.optimizer.step(params, grads, first=first)
        else:
            for k, i in enumerate(self.trainable):
                params, grads = self.layer_slots[i]
                scale = ratios[k] if ratios is not None else 1.0
                self.optimizer.step(params, grads, first=self.param_index[i], lr_scale=scale)
        self.trust_ratios = ratios or []
        if self.half is not None:
            self.flat_params[...] = self.master
        return totals[0], totals[1]

    def _trust_ratios(self, plan: Plan, limits: tuple[float, float]) -> list[float]:
        """Each trainable layer's LARS ratio from its weight and true-gradient norms; the
        squared norms of all layers come to the host in one copy."""
        xp, arrays, spans = self.xp, [], []
        for i in self.trainable:
            params, grads = self.layer_slots[i]
            spans.append((len(params), len(grads)))
            arrays += [xp.vdot(a.ravel(), a.ravel()) for a in (*params, *grads)]
        squares = to_numpy(xp.stack(arrays)) if arrays else np.zeros(0)
        ratios, at = [], 0
        for n_params, n_grads in spans:
            w = math.sqrt(sum(float(v) for v in squares[at:at + n_params]))
            at += n_params
            g = math.sqrt(sum(float(v) for v in squares[at:at + n_grads])) / self.grad_scale
            at += n_grads
            ratios.append(trust_ratio(w, g, self.optimizer.weight_decay, plan.trust_coefficient, limits))
        return ratios
