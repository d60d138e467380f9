"""The rank layout: which world rank runs which module, copy and rank-in-copy.

Modules take consecutive world ranks in the order the workflow lists them; inside a
module, copy 0 comes first. This is openDIEL's layout, and it needs no MPI, so
``diel validate`` can print it on a login node.
"""

from __future__ import annotations

from dataclasses import dataclass

from diel.executive.config import Workflow

__all__ = ["Placement", "Layout"]


@dataclass(frozen=True)
class Placement:
    """Where one world rank sits: module (and its index), copy and rank within the copy."""

    world_rank: int
    module: str
    module_index: int
    copy: int
    rank: int
    size: int


class Layout:
    """Every world rank's placement, with look-ups both ways."""

    def __init__(self, workflow: Workflow) -> None:
        placements = []
        for index, module in enumerate(workflow.modules):
            for copy in range(module.copies):
                for rank in range(module.size):
                    placements.append(Placement(len(placements), module.name, index, copy,
                                                rank, module.size))
        self.placements: tuple[Placement, ...] = tuple(placements)
        self._by_key = {(p.module, p.copy, p.rank): p.world_rank for p in placements}
        self._copies = {module.name: module.copies for module in workflow.modules}
        self._settings = {module.name: dict(module.settings) for module in workflow.modules}

    @property
    def total(self) -> int:
        """Number of world ranks the workflow needs."""
        return len(self.placements)

    def of(self, world_rank: int) -> Placement:
        """The placement of ``world_rank``."""
        return self.placements[world_rank]

    def copies(self, module: str) -> int:
        """How many copies ``module`` has; ValueError for an unknown module."""
        if module not in self._copies:
            raise ValueError(f"no module named '{module}' (modules: {', '.join(self._copies)})")
        return self._copies[module]

    def settings(self, module: str) -> dict:
        """A copy of ``module``'s settings; ValueError for an unknown module."""
        self.copies(module)
        return dict(self._settings[module])

    def world_rank(self, module: str, copy: int = 0, rank: int = 0) -> int:
        """The world rank of ``rank`` in ``copy`` of ``module``; ValueError when out of range."""
        key = (module, copy, rank)
        if key not in self._by_key:
            copies = self.copies(module)
            size = next(p.size for p in self.placements if p.module == module)
            raise ValueError(f"module '{module}' has copies 0..{copies - 1} and ranks "
                             f"0..{size - 1} per copy; got copy={copy}, rank={rank}")
        return self._by_key[key]

    def world_ranks(self, module: str, copy: int | None = None) -> list[int]:
        """World ranks of ``module`` (of one copy when ``copy`` is given), in order."""
        self.copies(module)
        return [p.world_rank for p in self.placements
                if p.module == module and (copy is None or p.copy == copy)]

    def describe(self) -> str:
        """A table of module, copy and world ranks, one line per copy."""
        rows = [("module", "copy", "ranks/copy", "world ranks")]
        seen: dict[tuple[str, int], list[int]] = {}
        for p in self.placements:
            seen.setdefault((p.module, p.copy), []).append(p.world_rank)
        for (module, copy), ranks in seen.items():
            span = str(ranks[0]) if len(ranks) == 1 else f"{ranks[0]}-{ranks[-1]}"
            rows.append((module, str(copy), str(len(ranks)), span))
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
                         for row in rows)
