"""Which file system holds a path, from the kernel's mount table, and the SQLite journal
mode that is safe on it.

SQLite's WAL mode keeps an index of the log in memory shared by every process that uses
the database (the ``-shm`` file, mapped into each). On a network file system (NFS,
Lustre, GPFS, BeeGFS, CephFS, SMB, ...) processes on different hosts map different
copies of it, so a reader on a login node and the search master on a compute node can
corrupt the database between them; SQLite's documentation says WAL "does not work over
a network filesystem". There the master uses the rollback journal
(``journal_mode=DELETE``, with ``synchronous=FULL``, which that mode needs to survive a
power cut), which relies only on the file system's POSIX locks. See docs/clusters.md.

The mount table is ``/proc/self/mounts`` (Linux); the mount holding a path is the one
whose mount point is the longest prefix of the path's real location. Elsewhere, or when
the table cannot be read, the file system is unknown and taken to be local.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Mount", "mount_of", "network_mount", "NETWORK_FILESYSTEMS", "MOUNTS"]

MOUNTS = Path("/proc/self/mounts")
# File system types whose files other hosts share (fuse.X is matched on X).
NETWORK_FILESYSTEMS = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "beegfs", "ceph", "cephfs",
    "glusterfs", "ocfs2", "gfs2", "afs", "pvfs2", "orangefs", "panfs", "wekafs", "9p",
    "sshfs", "davfs", "juicefs", "quobyte", "vboxsf"})
_ESCAPE = re.compile(r"\\([0-7]{3})")   # the mount table writes a space as \040


@dataclass(frozen=True)
class Mount:
    """A mounted file system: where it is mounted and its type (``nfs4``, ``ext4``...)."""

    point: str
    type: str

    @property
    def network(self) -> bool:
        """Whether other hosts share this file system's files."""
        kind = self.type.removeprefix("fuse.")
        return kind in NETWORK_FILESYSTEMS


def mount_of(path: str | Path, mounts: str | Path | None = None) -> Mount | None:
    """The mount holding ``path`` (which need not exist yet) according to the mount
    table ``mounts`` (default :data:`MOUNTS`); None when the table cannot be read."""
    try:
        lines = Path(mounts or MOUNTS).read_text().splitlines()
    except OSError:
        return None
    target = os.path.realpath(path)
    best: Mount | None = None
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), fields[1])
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best.point)):
            best = Mount(point, fields[2])
    return best


def network_mount(path: str | Path, mounts: str | Path | None = None) -> Mount | None:
    """The mount holding ``path`` when it is a network file system, else None."""
    mount = mount_of(path, mounts)
    return mount if mount is not None and mount.network else None
