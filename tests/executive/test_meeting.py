"""A node's ranks meet, sleeping, before MPI starts (:mod:`diel.executive.meeting`): each
waits in a blocking receive until the last has come, a rank that cannot meet goes on
after a bounded wait, and nothing is left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from diel.executive import meeting
from diel.executive.meeting import Meeting, job_key, open_meeting
from tests.helpers.launch import REPO

#: One rank of a meeting: comes after ``delay`` seconds, then says when it came and left,
#: the CPU it used in between and whether all met.
RANK = textwrap.dedent("""
    import json, sys, time
    from diel.executive.meeting import Meeting

    key, rank, size, delay, timeout = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \\
        float(sys.argv[4]), float(sys.argv[5])
    if rank == 0:
        time.sleep(delay / 2)   # a leader bound late: the others are told when it is
    place = Meeting(key, rank, size)
    time.sleep(delay if rank else delay / 2)
    came, cpu = time.time(), time.process_time()
    met = place.meet(timeout)
    print(json.dumps({"met": met, "came": came, "left": time.time(),
                      "cpu": time.process_time() - cpu}))
""")


def meet(ranks: dict[int, float], size: int, timeout: float = 30,
         timeouts: dict[int, float] | None = None) -> dict[int, dict]:
    """Start one process per rank in ``ranks`` (local rank: its delay before it comes) in a
    meeting of ``size`` ranks, each waiting at most ``timeout`` (or its own in
    ``timeouts``); what each said."""
    timeouts = timeouts or {}
    key = f"test-{os.getpid()}-{time.monotonic_ns()}"
    processes = {rank: subprocess.Popen(
        [sys.executable, "-c", RANK, key, str(rank), str(size), str(delay),
         str(timeouts.get(rank, timeout))],
        stdout=subprocess.PIPE, text=True, cwd=REPO) for rank, delay in ranks.items()}
    said = {}
    try:
        for rank, process in processes.items():
            out, _ = process.communicate(timeout=60)
            assert process.returncode == 0
            said[rank] = json.loads(out)
    finally:   # a failure leaves no rank waiting out its meeting
        for process in processes.values():
            process.kill()
            process.wait()
    return said


def test_the_ranks_wait_sleeping_until_the_last_has_come():
    said = meet({0: 0.2, 1: 0.0, 2: 0.0, 3: 0.6}, 4)
    assert all(view["met"] for view in said.values())
    last = max(view["came"] for view in said.values())
    assert all(view["left"] >= last for view in said.values())
    assert min(view["left"] for view in said.values()) - last < 0.5
    assert said[1]["left"] - said[1]["came"] > 0.3   # it waited for rank 3...
    assert said[1]["cpu"] < 0.05 and said[2]["cpu"] < 0.05   # ...sleeping


def test_a_missing_rank_is_waited_for_a_bounded_time_then_the_others_go_on():
    started = time.monotonic()
    said = meet({0: 0.0, 1: 0.0}, 3, timeouts={0: 1.0, 1: 10.0})
    assert time.monotonic() - started < 9
    assert [view["met"] for view in said.values()] == [False, False]
    assert 0.9 < said[0]["left"] - said[0]["came"] < 5
    assert abs(said[1]["left"] - said[0]["left"]) < 0.5   # let go by the leader
    assert said[0]["cpu"] < 0.05 and said[1]["cpu"] < 0.05


def test_a_rank_whose_leader_never_comes_goes_on():
    said = meet({1: 0.0}, 2, timeout=0.2)
    assert not said[1]["met"] and said[1]["left"] - said[1]["came"] < 5


def test_the_socket_is_closed_after_the_meeting(monkeypatch):
    monkeypatch.setattr(meeting, "job_key", lambda: f"test-alone-{os.getpid()}")
    place = open_meeting(0, 2)
    assert place is not None
    assert not place.meet(0.05)
    assert place._socket.fileno() == -1   # closed
    again = Meeting(place.key, 0, 2)   # its address is free again
    again.close()


@pytest.mark.parametrize("local_size, key", [(1, "a-key"), (2, None)])
def test_no_meeting_alone_on_a_node_or_without_a_key(monkeypatch, local_size, key):
    monkeypatch.setattr(meeting, "job_key", lambda: key)
    assert open_meeting(0, local_size) is None


def test_the_key_is_the_hydra_proxy_above_the_rank(monkeypatch):
    """Its parent, or a few ancestors up (``mpiexec -n 6 /usr/bin/time python ...``)."""
    monkeypatch.delenv("PMIX_NAMESPACE", raising=False)
    tree = {100: ("time", 50, "7"), 50: ("hydra_pmi_proxy", 40, "42"), 40: ("mpiexec", 1, "3")}
    monkeypatch.setattr(meeting, "_process", tree.get)
    monkeypatch.setattr(os, "getppid", lambda: 100)
    assert job_key() == "hydra-50-42"
    monkeypatch.setattr(os, "getppid", lambda: 50)
    assert job_key() == "hydra-50-42"
    monkeypatch.setattr(os, "getppid", lambda: 40)
    assert job_key() is None   # no proxy above: not started by Hydra
    chain = {pid: ("sh", pid - 1, "1") for pid in range(1000, 1010)}
    monkeypatch.setattr(meeting, "_process", chain.get)
    monkeypatch.setattr(os, "getppid", lambda: 1009)
    assert job_key() is None   # too far up to be this job's proxy


def test_the_key_under_open_mpi_is_its_job_namespace(monkeypatch):
    monkeypatch.setenv("PMIX_NAMESPACE", "prterun-node1-1234@1")
    key = job_key()
    assert key is not None and key.startswith("pmix-")
    monkeypatch.setenv("PMIX_NAMESPACE", "prterun-node1-1235@1")
    assert job_key() != key


def test_a_process_is_read_from_proc():
    assert meeting._process(os.getpid())[1] == os.getppid()
    assert meeting._process(-5) is None


def test_a_rank_that_comes_after_the_others_went_on_goes_on_at_once():
    """The wait is bounded from the meeting's opening (as early as a rank can: every rank
    of the node at about the same time): a rank slower than that comes to a leader gone,
    and goes on at once, not after a wait of its own for a leader that left (while the
    others waited for it in MPI_Init, spinning)."""
    key = f"test-{os.getpid()}-{time.monotonic_ns()}"
    leader, late = Meeting(key, 0, 2), Meeting(key, 1, 2)
    assert not leader.meet(0.5)
    started = time.monotonic()
    assert not late.meet(0.5)
    assert time.monotonic() - started < 0.2
