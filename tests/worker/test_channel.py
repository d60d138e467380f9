"""The isolated child's line to its rank (:class:`~diel.worker.channel.Channel`): pickled
messages of any size in order, a descriptor passed between them, a wait that ends with a
message or its timeout, and the other side's end told apart between messages (EOFError)
and inside one (OSError), as the rank's and the child's code expect."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from diel.worker.channel import HEADER, Channel


@pytest.fixture
def pair():
    ours, theirs = socket.socketpair()
    left, right = Channel(ours), Channel.from_fd(theirs.detach())
    yield left, right
    left.close()
    right.close()


def test_messages_arrive_whole_and_in_order_whatever_their_size(pair):
    left, right = pair
    big = bytes(range(256)) * 4096   # 1 MiB: over a socket buffer, sent in two writes
    sender = threading.Thread(target=lambda: [left.send(message) for message in (
        ("trial", {"number": 1}), ("report", 3, {"loss": big}), ("go",))])
    sender.start()
    assert right.recv() == ("trial", {"number": 1})
    assert right.recv() == ("report", 3, {"loss": big})
    assert right.recv() == ("go",)
    sender.join()


def test_poll_waits_for_a_message_or_its_timeout(pair):
    left, right = pair
    started = time.monotonic()
    assert right.poll(0.05) is False
    assert time.monotonic() - started >= 0.04
    assert right.poll(0) is False
    left.send(("done",))
    assert right.poll(None) is True and right.poll(0) is True
    assert right.recv() == ("done",)
    assert right.poll(0) is False


def test_a_descriptor_passes_between_messages(pair, tmp_path):
    left, right = pair
    (tmp_path / "copy").write_bytes(b"checkpoint bytes")
    fd = os.open(tmp_path / "copy", os.O_RDONLY)
    try:
        left.send(("memory", True))
        left.send_fd(fd)
        left.send(("next",))
    finally:
        os.close(fd)
    assert right.recv() == ("memory", True)
    received = right.recv_fd()
    try:
        assert os.pread(received, 100, 0) == b"checkpoint bytes"
    finally:
        os.close(received)
    assert right.recv() == ("next",)


def test_the_other_end_closing_between_messages_is_eof(pair):
    left, right = pair
    left.send(("last",))
    left.close()
    assert right.recv() == ("last",)
    assert right.poll(1) is True   # the end wakes a wait, as a message does
    with pytest.raises(EOFError):
        right.recv()


def test_the_other_end_closing_inside_a_message_is_an_os_error():
    ours, theirs = socket.socketpair()
    right = Channel(theirs)
    ours.sendall(HEADER.pack(100) + b"only part")
    ours.close()
    with pytest.raises(OSError, match="middle of a message"):
        right.recv()
    right.close()


def test_the_isolated_runner_and_its_child_import_no_multiprocessing():
    """multiprocessing (its contexts, ``tempfile``, ``random``) cost every worker rank
    and every started child some 3 ms for a socket's framing."""
    done = subprocess.run([sys.executable, "-c", "import sys, diel.worker.isolated, "
                           "diel.worker.child; print(' '.join(sys.modules))"],
                          capture_output=True, text=True, timeout=60, check=True)
    modules = done.stdout.split()
    assert [name for name in ("multiprocessing", "tempfile", "random", "shutil")
            if name in modules] == []
