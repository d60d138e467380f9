"""Learning-rate schedules for large batches: linear scaling, and DATE (You et al., SC'19).

A schedule is a set of settings; :meth:`Schedule.plan` binds it to one ``fit`` (batch
size, steps per epoch, epochs) and gives a :class:`Plan` that the model asks, each step,
for the learning rate and (DATE with LARS) the clipping limits of the layer-wise trust
ratios. docs/trainer.md states the formulas; in short, with ``k = B / B0``:

* ``linear``: ``peak = base_lr * k``; warm-up ``W = ceil(warmup_epochs * steps_per_epoch)``
  steps (the same number of epochs at every batch size); then ``peak`` until the end.
* ``date``: ``peak = base_lr * sqrt(k)``; warm-up ``W = round(warmup_epochs * k *
  steps_per_epoch)`` (LEGW: warm-up epochs grow linearly with the batch); then ONE linear
  decay from ``peak`` to 0 at ``total_steps``, never below ``min_lr`` (1e-6): no restarts
  and no oscillation (the issue that asked for DATE called this the paper's "roller-coaster"
  decay; what is implemented is this single ramp, and the docs name it so); LARS trust
  ratios clipped by limits that open from ``[1, 1]`` at the start to ``[trust_min,
  trust_max]`` at the end of warm-up.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from trainer.errors import ConfigError

__all__ = ["Schedule", "LinearScaling", "DATE", "Plan", "trust_ratio", "build_schedule",
           "SCHEDULES", "SCHEDULE_KEYS"]


@dataclass(frozen=True)
class Plan:
    """A schedule bound to one run; ``step`` counts global batches from 0."""

    peak_lr: float
    warmup_steps: int
    total_steps: int
    linear_decay: bool = False
    min_lr: float = 1e-6
    lars: bool = False
    trust_coefficient: float = 1.0
    trust_min: float = 1.0
    trust_max: float = 1.0

    def lr(self, step: int) -> float:
        """Learning rate of ``step``: linear warm-up from ``peak/W`` to ``peak``, then ``peak``
        (or, with ``linear_decay``, ``peak * (T - step) / (T - W)``), floored at ``min_lr``."""
        if step < self.warmup_steps:
            rate = self.peak_lr * (step + 1) / self.warmup_steps
        elif self.linear_decay and self.total_steps > self.warmup_steps:
            rate = self.peak_lr * (self.total_steps - step) / (self.total_steps - self.warmup_steps)
        else:
            rate = self.peak_lr
        return max(rate, self.min_lr)

    def trust_limits(self, step: int) -> tuple[float, float]:
        """``(lower, upper)`` for the trust ratios at ``step``: they open linearly from
        ``(1, 1)`` to ``(trust_min, trust_max)`` over the warm-up, so LARS phases in."""
        if step + 1 >= self.warmup_steps:
            return self.trust_min, self.trust_max
        progress = (step + 1) / self.warmup_steps
        return (1.0 - progress * (1.0 - self.trust_min), 1.0 + progress * (self.trust_max - 1.0))


def trust_ratio(weight_norm: float, grad_norm: float, weight_decay: float, coefficient: float,
                limits: tuple[float, float]) -> float:
    """LARS: ``coefficient * ||w|| / (||g|| + weight_decay * ||w||)`` clipped to ``limits``
    (1 when either norm is zero: a fresh zero bias, or a layer with no gradient)."""
    if weight_norm == 0.0 or grad_norm == 0.0:
        ratio = 1.0
    else:
        ratio = coefficient * weight_norm / (grad_norm + weight_decay * weight_norm)
    return min(max(ratio, limits[0]), limits[1])


@dataclass(frozen=True)
class Schedule:
    """Settings common to the large-batch schedules. ``base_lr`` defaults to the optimizer's
    learning rate; ``base_batch_size`` (B0) is the batch size ``base_lr`` was tuned for."""

    base_batch_size: int
    base_lr: float | None = None
    warmup_epochs: float = 0.0

    def __post_init__(self) -> None:
        _check(isinstance(self.base_batch_size, int) and not isinstance(self.base_batch_size, bool)
               and self.base_batch_size > 0, "base_batch_size", "a whole number > 0", self.base_batch_size)
        _check(self.base_lr is None or _number(self.base_lr) and self.base_lr > 0, "base_lr",
               "a number > 0", self.base_lr)
        _check(_number(self.warmup_epochs) and self.warmup_epochs >= 0, "warmup_epochs", "a number >= 0",
               self.warmup_epochs)

    def plan(self, batch_size: int, steps_per_epoch: int, epochs: int, default_lr: float) -> Plan:
        """This schedule for a run of ``epochs`` epochs of ``steps_per_epoch`` batches of
        ``batch_size``; ``default_lr`` stands in for an unset ``base_lr``."""
        raise NotImplementedError

    def base(self, default_lr: float) -> float:
        """``base_lr``, or ``default_lr`` when it is not set."""
        return float(default_lr if self.base_lr is None else self.base_lr)


@dataclass(frozen=True)
class LinearScaling(Schedule):
    """Goyal et al.'s rule: ``lr = base_lr * B / B0`` after ``warmup_epochs`` epochs of linear
    warm-up (the same number of epochs whatever the batch size)."""

    def plan(self, batch_size: int, steps_per_epoch: int, epochs: int, default_lr: float) -> Plan:
        peak = self.base(default_lr) * batch_size / self.base_batch_size
        return Plan(peak, math.ceil(self.warmup_epochs * steps_per_epoch), epochs * steps_per_epoch)


@dataclass(frozen=True)
class DATE(Schedule):
    """DATE: sqrt scaling, linear-epoch gradual warm-up, one linear decay to ``min_lr``, LARS."""

    warmup_epochs: float = 1.0
    total_steps: int | None = None
    min_lr: float = 1e-6
    lars: bool = True
    trust_coefficient: float = 0.1
    trust_min: float = 0.1
    trust_max: float = 10.0

    def __post_init__(self) -> None:
        super().__post_init__()
        _check(self.total_steps is None or isinstance(self.total_steps, int) and self.total_steps > 0,
               "total_steps", "a whole number > 0 (or unset: epochs x steps per epoch)", self.total_steps)
        _check(_number(self.min_lr) and self.min_lr > 0, "min_lr", "a number > 0", self.min_lr)
        _check(isinstance(self.lars, bool), "lars", "true or false", self.lars)
        _check(_number(self.trust_coefficient) and self.trust_coefficient > 0, "trust_coefficient",
               "a number > 0", self.trust_coefficient)
        _check(_number(self.trust_min) and 0 < self.trust_min <= 1, "trust_min", "a number in (0, 1]",
               self.trust_min)
        _check(_number(self.trust_max) and self.trust_max >= 1, "trust_max", "a number >= 1", self.trust_max)

    def plan(self, batch_size: int, steps_per_epoch: int, epochs: int, default_lr: float) -> Plan:
        k = batch_size / self.base_batch_size
        total = self.total_steps or epochs * steps_per_epoch
        return Plan(self.base(default_lr) * math.sqrt(k), round(self.warmup_epochs * k * steps_per_epoch),
                    total, linear_decay=True, min_lr=self.min_lr, lars=self.lars,
                    trust_coefficient=self.trust_coefficient, trust_min=self.trust_min,
                    trust_max=self.trust_max)


SCHEDULES: dict[str, type[Schedule]] = {"linear": LinearScaling, "date": DATE}
#: Trial / model settings that configure a schedule (``schedule`` names it).
SCHEDULE_KEYS = ("schedule",) + tuple(f.name for f in fields(DATE))


def build_schedule(settings: Mapping[str, Any]) -> Schedule | None:
    """The schedule a trial's settings ask for: ``schedule`` (``constant`` or unset: none,
    ``linear``, ``date``, or a :class:`Schedule`) with its settings taken from the same
    mapping. A schedule setting the chosen schedule does not take raises ConfigError."""
    name = settings.get("schedule")
    given = {k: settings[k] for k in SCHEDULE_KEYS[1:] if k in settings}
    if isinstance(name, Schedule):
        return name
    if name is None or name == "constant":
        if given:
            raise ConfigError(f"setting(s) {', '.join(sorted(given))} need schedule: date or linear")
        return None
    cls = SCHEDULES.get(str(name).lower())
    if cls is None:
        raise ConfigError(f"schedule: unknown schedule {name!r}; choose constant, {', '.join(SCHEDULES)}")
    accepted = {f.name for f in fields(cls)}
    extra = sorted(set(given) - accepted)
    if extra:
        raise ConfigError(f"schedule {name!r} has no setting(s) {', '.join(extra)}")
    if "base_batch_size" not in given:
        raise ConfigError(f"schedule {name!r} needs base_batch_size (the batch size base_lr was tuned for)")
    return cls(**given)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check(ok: bool, name: str, expected: str, value: Any) -> None:
    if not ok:
        raise ConfigError(f"{name} must be {expected}, got {value!r}")
