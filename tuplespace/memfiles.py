"""Memory files (Linux ``memfd``): how a server keeps a large chunk so that a reader on
its node maps it instead of receiving a copy.

A server receives a chunk of the distributed store of at least :data:`MAP_MIN_BYTES`
straight into a :class:`MemoryFile`, then seals it (no write, no resize: the kernel
refuses them to everyone, the server included), and keeps a read-only map of it to
send to readers elsewhere. A reader on the same node is granted the file's name instead
of its bytes, ``/proc/<server pid>/fd/<fd>`` (:class:`Grant`), opens it
(:func:`open_granted`, which checks that the name still leads to the very file granted)
and maps it privately (:func:`map_private`): its pages are the server's, shared until
the reader writes one, which then gets a page of its own (copy on write). A memory file
has no name in any file system, so nothing is left behind when a process dies; its
memory is freed once its last descriptor and map are gone.

Huge pages: a file of 4 KiB pages costs every reader a page-table entry per page (at
100 MiB, 25,600 of them: ~6 ms to fill, ~15 ms as page faults on a busy machine), and
the server a page fault per page as it receives. So the server asks the kernel to back
the file with 2 MiB pages (``MADV_COLLAPSE``, Linux >= 6.1, whatever the system's
transparent huge page settings but ``deny``) before receiving into it, and every map of
a file of 2 MiB or more is placed at a multiple of 2 MiB, as the file's huge pages are
(:func:`_placed`): a reader's map of 100 MiB is then filled in ~0.1 ms (measured here:
~20 ms for the same file mapped where the kernel chose), and the receive takes no page
faults. Where the kernel refuses (an older one, no free huge page), the file keeps 4 KiB
pages.

Where ``memfd_create`` is missing (another system than Linux) or fails, chunks are kept
in ordinary memory and every read is a copy; where opening a granted name fails (a
reader in another PID namespace, a hardened ``/proc``), the reader asks for the bytes.
"""

from __future__ import annotations

import ctypes
import fcntl
import functools
import mmap
import os
from typing import Any, Callable, NamedTuple

__all__ = ["MAP_MIN_BYTES", "MemoryFile", "Grant", "node_identity", "open_granted",
           "map_private", "supported"]

#: Chunks of at least this many bytes are kept in memory files: below it a copy costs
#: less than the map's system calls and round trip.
MAP_MIN_BYTES = 1 << 20
_SEALS = getattr(fcntl, "F_SEAL_WRITE", 0) | getattr(fcntl, "F_SEAL_SHRINK", 0) | \
    getattr(fcntl, "F_SEAL_GROW", 0) | getattr(fcntl, "F_SEAL_SEAL", 0)
_MADV_POPULATE_READ = 22   # Linux >= 5.14; older kernels refuse it (EINVAL) and fault instead
_MADV_COLLAPSE = 25        # Linux >= 6.1
_HUGE = 2 << 20            # a huge page (x86-64, arm64 with 4 KiB pages)
_MAP_FIXED = 0x10          # Linux on x86-64, arm64, ppc64, riscv64, s390x


def supported() -> bool:
    """Whether this system has memory files (Linux)."""
    return hasattr(os, "memfd_create")


def node_identity() -> str:
    """What names this node for the purpose of ``/proc``: its host name and this boot of
    its kernel (two containers of one host differ by name)."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{os.uname().nodename}/{boot}"


class Grant(NamedTuple):
    """What a server tells a reader on its node instead of sending a chunk: the memory
    file's owner and descriptor, its size and identity (device, inode), and the grant's
    number, which the reader returns once it has opened the file (or failed to)."""

    pid: int
    fd: int
    nbytes: int
    device: int
    inode: int
    number: int


class MemoryFile:
    """A chunk's memory file on the server: created at ``nbytes``, received into through
    :attr:`data` (a writable ``uint8`` array over a shared map), then :meth:`seal`\\ ed,
    after which :attr:`data` is a read-only map of it. Its descriptor is closed by
    :meth:`close`, or when the object is collected."""

    def __init__(self, nbytes: int, name: str) -> None:
        import numpy as np   # a server receiving an array payload has NumPy loaded already

        self.nbytes = nbytes
        self.fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(self.fd, nbytes)
            status = os.fstat(self.fd)
            self.identity = (status.st_dev, status.st_ino)
            self._map, start = _huge_map(self.fd, nbytes)
        except BaseException:
            os.close(self.fd)
            raise
        self.data: Any = np.frombuffer(self._map, np.uint8, nbytes, start)

    def seal(self) -> Any:
        """Once the chunk is received: refuse every further change to the file, and map
        it read-only; returns the new :attr:`data`. (If the writable map is still in use
        elsewhere, it stays, unsealed: the server never writes to it either way.)"""
        import numpy as np

        self.data = None
        try:
            self._map.close()
        except BufferError:   # someone still holds the receive buffer
            self.data = np.frombuffer(self._map, np.uint8)
            return self.data
        try:
            fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, _SEALS)
        except (OSError, AttributeError):
            pass   # a kernel without seals: the server's own discipline stands
        self._map = mmap.mmap(self.fd, self.nbytes, access=mmap.ACCESS_READ)
        self.data = np.frombuffer(self._map, np.uint8)
        return self.data

    def grant(self, number: int) -> Grant:
        """The grant of this file for a reader on the node."""
        return Grant(os.getpid(), self.fd, self.nbytes, *self.identity, number)

    def close(self) -> None:
        """Close the descriptor (maps of it, here or in readers, stay valid). Idempotent."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:
        self.close()


def _huge_map(fd: int, nbytes: int) -> tuple[mmap.mmap, int]:
    """A shared, writable map of the file ``fd`` backed by huge pages where the kernel
    grants them (module docstring), and where in it the file starts. ``MADV_COLLAPSE``
    wants some pages present: one byte of each 2 MiB is written first (the huge pages
    it makes of them are zero-filled)."""
    placed = _placed(fd, nbytes, mmap.MAP_SHARED) if nbytes >= _HUGE else None
    if placed is None:
        return mmap.mmap(fd, nbytes), 0
    room, start = placed
    for offset in range(start, start + nbytes, _HUGE):
        room[offset] = 0
    try:
        room.madvise(_MADV_COLLAPSE, start, nbytes - nbytes % _HUGE)
    except OSError:
        pass   # an older kernel, huge pages denied or none free: 4 KiB pages then
    return room, start


def _placed(fd: int, nbytes: int, flags: int) -> tuple[mmap.mmap, int] | None:
    """A writable map (``flags``: shared or private) of ``nbytes`` of the file ``fd``
    at a multiple of 2 MiB, so that the file's huge pages map whole, and where it starts
    in the map returned: an anonymous map 2 MiB longer that owns it (closing that one
    unmaps both). None where the C library cannot be asked (the caller maps plainly)."""
    room = mmap.mmap(-1, nbytes + _HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    base = ctypes.addressof(ctypes.c_char.from_buffer(room))
    start = -base % _HUGE
    try:
        placed = _libc_mmap()(base + start, nbytes, mmap.PROT_READ | mmap.PROT_WRITE,
                              flags | _MAP_FIXED, fd, 0)
    except (OSError, AttributeError):   # no C library to ask
        placed = None
    if placed != base + start:
        room.close()
        return None
    return room, start


@functools.cache
def _libc_mmap() -> Callable[..., int | None]:
    """The C library's ``mmap``, which can place a map (Python's cannot)."""
    function = ctypes.CDLL(None, use_errno=True).mmap
    function.restype = ctypes.c_void_p
    function.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                         ctypes.c_int, ctypes.c_long]
    return function


def open_granted(grant: Grant) -> int | None:
    """A read-only descriptor of the file ``grant`` names, or None when it cannot be
    opened or the name now leads elsewhere (the file was closed and its number reused):
    its device, inode and size must be the granted ones."""
    try:
        fd = os.open(f"/proc/{grant.pid}/fd/{grant.fd}", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        status = os.fstat(fd)
    except OSError:
        status = None
    if status is None or (status.st_dev, status.st_ino, status.st_size) != \
            (grant.device, grant.inode, grant.nbytes):
        os.close(fd)
        return None
    return fd


def map_private(fd: int, nbytes: int) -> memoryview:
    """A private, writable map of ``nbytes`` of ``fd`` (a memoryview of exactly that
    many bytes; the map goes when the last view of it does): reads see the file's pages,
    a write gets a page of its own (the file never changes). Placed at a multiple of
    2 MiB (module docstring), and its page table filled at once where the kernel can
    (``MADV_POPULATE_READ``), so that the first pass over the data takes no page fault."""
    placed = _placed(fd, nbytes, mmap.MAP_PRIVATE) if nbytes >= _HUGE else None
    mapped, start = placed or (mmap.mmap(fd, nbytes, access=mmap.ACCESS_COPY), 0)
    try:
        mapped.madvise(_MADV_POPULATE_READ, start, nbytes)
    except OSError:
        pass   # an older kernel: pages fault in as they are read
    return memoryview(mapped)[start:start + nbytes]
