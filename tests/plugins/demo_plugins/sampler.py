"""``strategy: {demo: {step: S}}``: trial ``n`` tries ``x = S * (n + 1)`` (wrapping
round the parameter's range), a sequence no builtin strategy would propose, so a test can
tell this sampler was used."""

from __future__ import annotations

from typing import Any

from diel.checks import no_unknown_keys, whole_number
from diel.search.samplers import Sampler


class DemoSampler(Sampler):
    """Proposes ``{x: step * (number + 1)}`` over a space of ``int`` parameters (each
    parameter the same value, wrapped into its range)."""

    kinds = ("int",)

    @classmethod
    def check(cls, name, space, directions, options, path) -> None:
        no_unknown_keys(options, ("step",), path)
        whole_number(options.get("step", 1), f"{path}.step", 1)

    def propose(self, number: int) -> dict[str, Any] | None:
        x = self.options.get("step", 1) * (number + 1)
        return {p.name: int(p.low + (x - p.low) % (p.high - p.low + 1))
                for p in self.space.params}
