"""Which GPU a worker rank uses: one per rank, by its place among the ranks of its node.

The count comes from ``CUDA_VISIBLE_DEVICES`` when it is set, else from the NVIDIA device
files, so no GPU library is imported to decide. An isolated child or a program gets
``CUDA_VISIBLE_DEVICES`` set to its one GPU, so PyTorch, JAX or CuPy code that uses
"the first GPU" needs no change.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

__all__ = ["GpuBinding", "visible_gpus", "bind_gpu"]

_DEVICE_FILE = re.compile(r"nvidia(\d+)")


@dataclass(frozen=True)
class GpuBinding:
    """``index``: this GPU's CUDA number in the rank's own process; ``visible``: the
    ``CUDA_VISIBLE_DEVICES`` value that shows a child process just this GPU."""

    index: int
    visible: str


def visible_gpus(environ: Mapping[str, str] | None = None, dev: Path = Path("/dev")) -> list[str]:
    """IDs of the GPUs this process may use, in CUDA order."""
    environ = os.environ if environ is None else environ
    listed = environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        ids = [item.strip() for item in listed.split(",") if item.strip()]
        # CUDA stops at the first invalid entry, such as -1 meaning "no GPU"
        valid = []
        for item in ids:
            if item.startswith("-"):
                break
            valid.append(item)
        return valid
    try:
        numbers = sorted(int(m.group(1)) for p in dev.iterdir()
                         if (m := _DEVICE_FILE.fullmatch(p.name)))
    except OSError:
        return []
    return [str(n) for n in numbers]


def bind_gpu(local_rank: int, gpus: list[str]) -> GpuBinding | None:
    """The GPU for the rank ``local_rank`` of its node (round robin), or None without GPUs."""
    if not gpus:
        return None
    index = local_rank % len(gpus)
    return GpuBinding(index=index, visible=gpus[index])
