"""Start MPI for ``diel run``, on one node through MPICH's cheaper network module.

The ``mpich`` wheel from PyPI (the ``mpi`` extra) is built with two network modules,
UCX and libfabric (OFI), and takes UCX unless told otherwise. When every rank of the job
is on this node, MPICH carries their messages through shared memory and the network
module costs mostly its start: UCX's cost 6 ranks on 2 cores some 0.1 CPU-s more than
OFI's (0.53 against 0.42 CPU-s for ``mpiexec -n 6`` of an ``import mpi4py.MPI``). So
there, and only where the library has both, MPI starts with ``MPIR_CVAR_CH4_NETMOD=ofi``.
The variable is set for ``MPI_Init`` alone (MPICH reads it there) and then taken back,
so that trials, and any ``mpiexec`` they launch across nodes, see the user's environment
as it was.

The choice stays MPICH's wherever the user shows one: a netmod named (by any of MPICH's
three spellings of ``CH4_NETMOD``); ranks of one node made to talk through the netmod
(``NOLOCAL``, ``NUM_CLIQUES``, ``ODD_EVEN_CLIQUES``); or any ``UCX_*`` or ``FI_*``
variable, the settings of one netmod's library (a libfabric provider named while UCX
is in use has no effect, and making it take effect could fail where that provider
cannot run). It stays too where the launcher does not say that every rank is on this
node (only MPICH's Hydra does, before MPI starts: ``MPI_LOCALNRANKS`` equal to
``PMI_SIZE``), and where the loopback interface is down. Nothing else is set: naming a
libfabric provider (``FI_PROVIDER``) made no measurable difference and may name one that
another build lacks.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import re
import socket
import struct
import sys
from collections.abc import Mapping
from types import ModuleType

__all__ = ["start_mpi"]

NETMOD_VARIABLE = "MPIR_CVAR_CH4_NETMOD"
ONE_NODE_NETMOD = "ofi"
#: The netmods the library must list before :data:`ONE_NODE_NETMOD` is chosen: a value it
#: was not built with makes every rank crash in ``MPI_Init``.
BOTH_NETMODS = frozenset({"ucx", "ofi"})
#: MPICH reads each of its control variables under these three prefixes.
CVAR_PREFIXES = ("MPIR_CVAR_", "MPIR_PARAM_", "MPICH_")
#: MPICH's variables that choose the netmod or send a node's own messages through it.
NETMOD_CVARS = ("CH4_NETMOD", "NOLOCAL", "NUM_CLIQUES", "ODD_EVEN_CLIQUES")
#: The prefixes of the netmods' own libraries' settings (UCX's, libfabric's).
NETMOD_LIBRARY_PREFIXES = ("UCX_", "FI_")
#: Linux's request for an interface's flags, and the flag saying it is up. OFI on one
#: node still sends through the loopback interface (``MPI_Finalize``'s flush): with it
#: down, as in a network namespace nobody set up (``unshare -n``), every rank's
#: ``MPI_Finalize`` fails, UCX's not.
SIOCGIFFLAGS = 0x8913
IFF_UP = 0x1
_IFREQ = struct.Struct("16sH22x")   # struct ifreq: the name, then ifr_flags
_DEVICE_LINE = re.compile(r"^MPICH Device:\s*ch4:(.*)$", re.MULTILINE)


def start_mpi() -> ModuleType:
    """Start MPI (``MPI_Init_thread`` at mpi4py's configured thread level, or
    ``MPI_Init`` where ``mpi4py.rc.threads`` is off) and return mpi4py's ``MPI`` module;
    the module as it is where MPI has already started. MPI is finalized at exit as when
    mpi4py starts it itself (``mpi4py.rc.finalize``)."""
    import mpi4py

    if "mpi4py.MPI" not in sys.modules:
        mpi4py.rc.initialize = False   # to choose the netmod first
        if mpi4py.rc.finalize is None:   # mpi4py's default: finalize MPI if it started it
            mpi4py.rc.finalize = True
    from mpi4py import MPI

    if MPI.Is_initialized():
        return MPI
    if mpi4py.rc.finalize is None:
        # imported earlier, not starting MPI and not told to end it: mpi4py will not
        atexit.register(_finalize, MPI)
    netmod = _netmod_for(MPI.Get_library_version(), os.environ, _loopback_up())
    if netmod is not None:
        os.environ[NETMOD_VARIABLE] = netmod
    try:
        if mpi4py.rc.threads:
            MPI.Init_thread(_thread_level(MPI, mpi4py.rc.thread_level))
        else:
            MPI.Init()
    finally:
        if netmod is not None:
            del os.environ[NETMOD_VARIABLE]
    return MPI


def _netmod_for(library: str, environ: Mapping[str, str], loopback_up: bool) -> str | None:
    """The netmod to start ``library`` (``MPI.Get_library_version()``) with, given the
    process's ``environ``: :data:`ONE_NODE_NETMOD` when the library is MPICH built with
    :data:`BOTH_NETMODS`, the user chose nothing about netmods, Hydra says every rank is
    on this node and the loopback interface is up; else None (MPICH's own choice)."""
    if not loopback_up:
        return None
    device = _DEVICE_LINE.search(library)
    if device is None or not BOTH_NETMODS <= set(re.split(r"[\s,]+", device.group(1).strip())):
        return None
    chosen = {prefix + cvar for prefix in CVAR_PREFIXES for cvar in NETMOD_CVARS}
    if any(name in chosen or name.startswith(NETMOD_LIBRARY_PREFIXES) for name in environ):
        return None
    return ONE_NODE_NETMOD if _all_ranks_here(environ) else None


def _all_ranks_here(environ: Mapping[str, str]) -> bool:
    """Whether Hydra (MPICH's ``mpiexec``) put every rank of the job on this node: its
    count of this node's ranks is the job's size. False where either is not given."""
    try:
        return int(environ["MPI_LOCALNRANKS"]) == int(environ["PMI_SIZE"])
    except (KeyError, ValueError):
        return False


def _loopback_up() -> bool:
    """Whether the loopback interface (``lo``) of this process's network namespace is
    up; False where that cannot be asked (not Linux)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            answer = fcntl.ioctl(probe, SIOCGIFFLAGS, _IFREQ.pack(b"lo", 0))
    except OSError:
        return False
    return bool(_IFREQ.unpack(answer)[1] & IFF_UP)


def _thread_level(mpi: ModuleType, name: str) -> int:
    """mpi4py's ``rc.thread_level`` name as MPI's constant (``multiple``, its default,
    for a name it does not know, as mpi4py does after warning)."""
    levels = {"single": mpi.THREAD_SINGLE, "funneled": mpi.THREAD_FUNNELED,
              "serialized": mpi.THREAD_SERIALIZED, "multiple": mpi.THREAD_MULTIPLE}
    return levels.get(name, mpi.THREAD_MULTIPLE)


def _finalize(mpi: ModuleType) -> None:
    """Finalize MPI at exit unless that is done already (``diel run``'s own end)."""
    if mpi.Is_initialized() and not mpi.Is_finalized():
        mpi.Finalize()
