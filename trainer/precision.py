"""Mixed precision: float16 storage and GEMMs, float32 master weights, dynamic loss scaling.

The model keeps the layers' parameters, activations and gradients in float16 and a
float32 master copy of the parameters that the optimizer updates; after each step the
master is cast back into the float16 copy. The loss gradient is multiplied by
``LossScaler.scale`` before the backward pass so small gradients do not flush to zero in
float16; the float32 gradients are divided by it again. A step whose gradients hold an
inf or NaN is skipped and the scale halved; after ``growth_interval`` good steps in a row
the scale doubles (the scheme of Micikevicius et al., "Mixed Precision Training", 2018).

bfloat16 is not offered: neither NumPy nor CuPy has a bfloat16 dtype.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trainer.errors import ConfigError

__all__ = ["LossScaler", "half_dtype"]


def half_dtype(setting: Any) -> np.dtype | None:
    """The storage dtype a ``mixed_precision`` setting asks for: None for off (False,
    None, ``float32``), float16 for True / ``float16`` / ``fp16``."""
    if setting in (None, False, "float32", "none", "off"):
        return None
    if setting is True or setting in ("float16", "fp16", "half"):
        return np.dtype(np.float16)
    if setting == "bfloat16":
        raise ConfigError("mixed_precision: bfloat16 is not available (NumPy and CuPy have no "
                          "bfloat16 dtype); use float16")
    raise ConfigError(f"mixed_precision must be true, false or 'float16', got {setting!r}")


class LossScaler:
    """Dynamic loss scale: ``scale`` multiplies the loss gradient; :meth:`update` is told
    whether the step's gradients were finite and says whether to take the step."""

    def __init__(self, scale: float = 2.0 ** 15, growth_interval: int = 200, factor: float = 2.0,
                 min_scale: float = 1.0) -> None:
        if not scale > 0:
            raise ConfigError(f"loss_scale must be > 0, got {scale!r}")
        if isinstance(growth_interval, bool) or not isinstance(growth_interval, int) or growth_interval < 1:
            raise ConfigError(f"scale_window must be a whole number >= 1, got {growth_interval!r}")
        if not factor > 1:
            raise ConfigError(f"loss scale factor must be > 1, got {factor!r}")
        self.scale, self.growth_interval, self.factor = float(scale), growth_interval, float(factor)
        self.min_scale = float(min_scale)
        self.good_steps, self.skipped = 0, 0

    def update(self, finite: bool) -> bool:
        """Record one step; True when it should be applied (its gradients were finite)."""
        if not finite:
            self.scale = max(self.scale / self.factor, self.min_scale)
            self.good_steps = 0
            self.skipped += 1
            return False
        self.good_steps += 1
        if self.good_steps >= self.growth_interval:
            self.scale *= self.factor
            self.good_steps = 0
        return True
