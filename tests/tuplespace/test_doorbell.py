"""Doorbells (tuplespace.doorbell): what envelopes carry, who counts as ringing, and that a
ring ends a wait; without MPI (two Doorbell objects in one process stand for two ranks)."""

from __future__ import annotations

import sys
import time

import pytest

from tuplespace.doorbell import Doorbell, doorbell

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


def test_first_envelope_announces_the_bell_then_only_a_flag() -> None:
    mine = Doorbell()
    first = mine.stamp(3)
    assert first == (mine.address, mine.node, False)   # peer 3's bell is not known yet
    assert mine.stamp(3) is False
    mine.heard(3, (b"\0peer", mine.node, False))
    assert mine.stamp(3) is True                         # now known: this message is rung


def test_a_peer_rings_only_after_a_rung_message_and_stops_at_an_unrung_one() -> None:
    mine = Doorbell()
    mine.heard(4, (b"\0peer", mine.node, False))
    assert not mine.rung_by([4])                         # it did not know our bell yet
    mine.heard(4, True)
    assert mine.rung_by([4]) and not mine.rung_by([4, 5])
    changes = mine.changes
    mine.heard(4, False)
    assert not mine.rung_by([4]) and mine.changes == changes + 1


def test_a_peer_of_another_node_is_never_rung() -> None:
    mine = Doorbell()
    mine.heard(2, (b"\0elsewhere", "other-host/boot", True))
    assert mine.stamp(2) == (mine.address, mine.node, False)
    assert mine.stamp(2) is False


def test_a_ring_ends_the_wait_and_drain_forgets_it() -> None:
    sleeper, ringer = Doorbell(), Doorbell()
    ringer.heard(0, (sleeper.address, sleeper.node, False))
    assert not sleeper.wait(0.001)
    ringer.ring(0)
    started = time.monotonic()
    assert sleeper.wait(5.0)
    assert time.monotonic() - started < 1.0
    assert sleeper.wait(0.0)                              # still rung until drained
    sleeper.drain()
    assert not sleeper.wait(0.001)


def test_a_gone_peer_is_not_rung_again() -> None:
    ringer = Doorbell()
    ringer.heard(1, (b"\0tuplespace-test-no-such-bell", ringer.node, False))   # it ended
    assert ringer.stamp(1) == (ringer.address, ringer.node, True)
    ringer.ring(1)
    assert ringer.stamp(1) is False
    ringer.ring(1)   # a message stamped rung before another thread found it gone: no ring


def test_one_doorbell_per_process() -> None:
    assert doorbell() is doorbell()
