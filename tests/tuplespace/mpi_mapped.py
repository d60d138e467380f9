"""``mpiexec -n 2``: rank 0 serves; rank 1 reads a large array the server keeps in a
memory file: mapped (another process's file), handed to a child process that maps it
itself, and copied where the file will not open. Prints what it saw, one line each."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
from mpi4py import MPI

from tuplespace import Client, Server, memfiles

CHILD = """
import sys
import numpy as np
from tuplespace.memfiles import map_private
fd, nbytes = int(sys.argv[1]), int(sys.argv[2])
array = np.frombuffer(map_private(fd, nbytes), np.float64)
print("CHILD", array[0], bool((array == 7.0).all()))
"""


def main() -> None:
    comm = MPI.COMM_WORLD.Dup()
    if comm.rank == 0:
        Server(comm, [0]).run()
        return
    space = Client(comm, [0])
    try:
        stored = np.full((1 << 20) // 8 + 3, 7.0)
        space.dist_tput("m/x", stored)
        got = space.dist_tread("m/x", timeout=10)
        print("MAPPED", space.dist_reads["mapped"], space.dist_reads["copied"],
              bool((got == stored).all()), flush=True)
        fd = space.dist_open("m/x", timeout=10)
        try:
            child = subprocess.run([sys.executable, "-c", CHILD, str(fd), str(stored.nbytes)],
                                   pass_fds=(fd,), capture_output=True, text=True, timeout=60)
        finally:
            os.close(fd)
        print(child.stdout.strip() or child.stderr, flush=True)
        memfiles.open_granted = lambda grant: None   # as where /proc refuses
        space.dist_reads.update(mapped=0, copied=0)
        got = space.dist_tread("m/x", timeout=10)
        print("FALLBACK", space.dist_reads["mapped"], space.dist_reads["copied"],
              bool((got == stored).all()), flush=True)
    finally:
        space.shutdown()


if __name__ == "__main__":
    main()
