"""The environment of a trial's process (an isolated child or a program).

It is this rank's environment without the MPI launcher's variables, so a trial that
imports mpi4py starts as a singleton instead of joining (and confusing) the job, and with
``CUDA_VISIBLE_DEVICES`` naming only the rank's GPU.
"""

from __future__ import annotations

import os
from typing import Mapping

from diel.worker.gpu import GpuBinding

__all__ = ["trial_environment", "LAUNCHER_PREFIXES"]

LAUNCHER_PREFIXES = ("PMI_", "PMIX_", "HYDRA_", "HYDI_", "MPI_LOCAL", "OMPI_", "MPIEXEC_")


def trial_environment(gpu: GpuBinding | None, extra: Mapping[str, str] | None = None,
                      base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: os.environ) less launcher variables, plus the GPU and ``extra``."""
    env = {key: value for key, value in (os.environ if base is None else base).items()
           if not key.startswith(LAUNCHER_PREFIXES)}
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu.visible
    env.update(extra or {})
    return env
