"""dist_tread: a read of a distributed array that leaves it stored."""

from __future__ import annotations

import numpy as np
import pytest

from tuplespace import SpaceTimeoutError

from tests.helpers.tuplespace import InProcSpace


def test_a_read_leaves_the_array_for_other_readers_and_a_taker(inproc: InProcSpace) -> None:
    writer, reader = inproc.clients
    data = np.arange(1000, dtype=np.float64).reshape(10, 100)
    writer.dist_tput("ckpt/7", data)
    assert np.array_equal(reader.dist_tread("ckpt/7", timeout=5), data)
    out = np.zeros_like(data)
    assert writer.dist_tread("ckpt/7", timeout=5, out=out) is out and np.array_equal(out, data)
    assert np.array_equal(reader.dist_tget("ckpt/7", timeout=5), data)   # still there to take
    with pytest.raises(SpaceTimeoutError, match=r"dist_tread\('ckpt/7'\): no distributed array"):
        reader.dist_tread("ckpt/7", timeout=0)


def test_a_wrong_out_leaves_the_array_stored(inproc: InProcSpace) -> None:
    writer, reader = inproc.clients
    writer.dist_tput("ckpt/1", np.ones(64, np.uint8))
    with pytest.raises(ValueError, match=r"dist_tread\('ckpt/1'\): out must be a C-contiguous "
                                         r"NumPy array of shape \(64,\) and dtype uint8"):
        reader.dist_tread("ckpt/1", timeout=5, out=np.empty(63, np.uint8))
    assert reader.dist_tread("ckpt/1", timeout=5).sum() == 64


def test_an_array_taken_during_a_read_is_an_error_not_a_wait(inproc: InProcSpace) -> None:
    taker, reader = inproc.clients
    taker.dist_tput("ckpt/2", np.ones(300, np.int32))
    for server in reader.servers:   # the reader's first contacts (its HELLOs) are behind it
        reader._welcome(server, "hello")
    request = reader._request

    def plan_then_taken(*args):   # the taker takes the array between plan and chunks
        reply = request(*args)
        taker.dist_tget("ckpt/2", timeout=5)
        return reply

    reader._request = plan_then_taken
    with pytest.raises(SpaceTimeoutError, match=r"dist_tread\('ckpt/2'\): the array was taken "
                                                "while it was being read"):
        reader.dist_tread("ckpt/2", timeout=5)
