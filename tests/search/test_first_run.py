"""The README's main job as a user first sees it, in a terminal of 80 and of 120 columns
(a pseudo-terminal): a live progress line, then the report, fitting the terminal, and
nothing after it."""

from __future__ import annotations

import fcntl
import os
import re
import select
import shutil
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from tests.helpers.launch import REPO, find_mpiexec

ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def in_terminal(argv: list[str], columns: int, cwd: Path,
                timeout: float = 240) -> tuple[str, list[str]]:
    """What ``argv`` writes to a terminal ``columns`` wide, and the lines it shows: each
    as the terminal leaves it (the last of the versions a carriage return redrew)."""
    ours, theirs = os.openpty()
    fcntl.ioctl(theirs, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    process = subprocess.Popen(argv, stdin=theirs, stdout=theirs, stderr=theirs, cwd=cwd,
                               env=env, start_new_session=True)
    os.close(theirs)
    shown, deadline = b"", time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if select.select([ours], [], [], 1.0)[0]:
                try:
                    chunk = os.read(ours, 65536)
                except OSError:   # every writer closed its end: the job is over
                    break
                if not chunk:
                    break
                shown += chunk
            elif process.poll() is not None:
                break
        else:
            raise AssertionError(f"still running after {timeout} s: {shown[-2000:]!r}")
    finally:
        os.close(ours)
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)
    assert process.returncode == 0, shown.decode(errors="replace")[-3000:]
    text = ESCAPES.sub("", shown.decode(errors="replace")).replace("\r\n", "\n")
    return text, [line.split("\r")[-1] for line in text.rstrip("\n").split("\n")]


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("columns", [80, 120])
def test_the_main_job_reads_well_in_a_terminal(tmp_path, columns):
    shutil.copytree(REPO / "configs", tmp_path / "configs")
    argv = [find_mpiexec(), "-n", "4", sys.executable, "-m", "diel", "run",
            "configs/mnist_grid.yaml"]
    written, shown = in_terminal(argv, columns, tmp_path)
    assert "\rsearch mnist_grid " in written   # the live progress line, redrawn
    heading = next(i for i, line in enumerate(shown) if line.startswith("best 5 of study"))
    assert shown[heading - 1].startswith("search mnist_grid 0:00:"), shown   # the final state
    assert "24/24 done" in shown[heading - 1], shown
    header, rule, *rows = shown[heading + 1:]
    assert header.split()[:6] == ["number", "objective", "learning_rate", "layers", "width",
                                  "activation"], shown
    assert "error" not in header.split()
    more = [line for line in rows if line.startswith("more: diel results")]
    assert len(rows) == 5 + len(more) and rows[-1] == (more or rows)[-1], shown  # nothing after
    for line in shown:
        assert len(line) <= columns, (columns, line)
