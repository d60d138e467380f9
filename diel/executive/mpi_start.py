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
``PMI_SIZE``), and where the loopback interface is down. Naming a libfabric provider
(``FI_PROVIDER``) made no measurable difference and may name one that another build
lacks, so diel does not.

Where the user shows no choice and the job is on this node, the library also loads with
``UCX_MEM_MMAP_HOOK_MODE=reloc``. The wheel's ``libmpi`` links UCX whatever the netmod,
and UCX's library, as it loads, installs its memory hooks by patching the code of
``mmap`` and its kin ("bistro", its default): some 40 ms of CPU per rank, 0.2 CPU-s of a
6-rank job's 1.5 on 2 cores, for hooks that the OFI netmod never uses. ``reloc``, UCX's
other way to install them (through the relocation tables), costs next to nothing here.
Where MPICH runs UCX all the same (a library built without OFI), its memory events still
work in that mode, and on one node its messages go through MPICH's shared memory anyway.
The variable is read as the library loads, so it is set before the load and taken back
with the netmod's: whether the library has both netmods is known only once it is loaded.
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
#: UCX's way to install its memory hooks, read as its library loads (module docstring).
HOOK_VARIABLE, ONE_NODE_HOOKS = "UCX_MEM_MMAP_HOOK_MODE", "reloc"
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

    loaded = "mpi4py.MPI" in sys.modules
    if not loaded:
        mpi4py.rc.initialize = False   # to choose the netmod first
        if mpi4py.rc.finalize is None:   # mpi4py's default: finalize MPI if it started it
            mpi4py.rc.finalize = True
    ours = _ours_to_choose(os.environ, _loopback_up())
    chosen = {HOOK_VARIABLE: ONE_NODE_HOOKS} if ours and not loaded else {}
    os.environ.update(chosen)   # for MPI's start alone: taken back below
    try:
        from mpi4py import MPI

        if MPI.Is_initialized():
            return MPI
        if mpi4py.rc.finalize is None:
            # imported earlier, not starting MPI and not told to end it: mpi4py will not
            atexit.register(_finalize, MPI)
        if ours and _has_both_netmods(MPI.Get_library_version()):
            chosen[NETMOD_VARIABLE] = os.environ[NETMOD_VARIABLE] = ONE_NODE_NETMOD
        if mpi4py.rc.threads:
            MPI.Init_thread(_thread_level(MPI, mpi4py.rc.thread_level))
        else:
            MPI.Init()
    finally:
        for name in chosen:
            del os.environ[name]
    return MPI


def _ours_to_choose(environ: Mapping[str, str], loopback_up: bool) -> bool:
    """Whether diel may choose how MPI starts (:data:`ONE_NODE_HOOKS`, and
    :data:`ONE_NODE_NETMOD` where the library :func:`_has_both_netmods`), given the
    process's ``environ``: the user chose nothing about netmods (module docstring), Hydra
    says every rank is on this node and the loopback interface is up."""
    if not loopback_up:
        return False
    chosen = {prefix + cvar for prefix in CVAR_PREFIXES for cvar in NETMOD_CVARS}
    if any(name in chosen or name.startswith(NETMOD_LIBRARY_PREFIXES) for name in environ):
        return False
    return _all_ranks_here(environ)


def _has_both_netmods(library: str) -> bool:
    """Whether ``library`` (``MPI.Get_library_version()``) is MPICH built with
    :data:`BOTH_NETMODS`."""
    device = _DEVICE_LINE.search(library)
    return device is not None and BOTH_NETMODS <= set(
        re.split(r"[\s,]+", device.group(1).strip()))


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
