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
from diel.procfs import ProcessStat, process_stat
from tests.helpers.launch import REPO

#: One rank of a meeting: comes after ``delay`` seconds, then says when it came and left,
#: the CPU it used in between and whether all met, or which rank it learnt had ended. A
#: rank given ``dies`` seconds dies (exit status 1) that long after it is bound.
RANK = textwrap.dedent("""
    import json, os, sys, threading, time
    from diel.executive import meeting
    from diel.executive.meeting import Meeting, RankEnded

    meeting.LOOK_PERIOD_S = 0.1   # the tests' deaths are found sooner, the same way

    key, rank, size, delay, timeout, dies = sys.argv[1], int(sys.argv[2]), \\
        int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
    if rank == 0:
        time.sleep(delay / 2)   # a leader bound late: the others are told when it is
    place = Meeting(key, rank, size)
    if dies:
        threading.Timer(float(dies), os._exit, (1,)).start()
    time.sleep(delay if rank else delay / 2)
    came, cpu = time.time(), time.process_time()
    try:
        said = {"met": place.meet(timeout)}
    except RankEnded as ended:
        said = {"ended": ended.local_rank}
    print(json.dumps({**said, "came": came, "left": time.time(),
                      "cpu": time.process_time() - cpu}))
""")


def meet(ranks: dict[int, float], size: int, timeout: float = 30,
         timeouts: dict[int, float] | None = None,
         dying: dict[int, float] | None = None) -> dict[int, dict]:
    """Start one process per rank in ``ranks`` (local rank: its delay before it comes) in a
    meeting of ``size`` ranks, each waiting at most ``timeout`` (or its own in
    ``timeouts``), those in ``dying`` dying that long after they are bound; what each of
    the others said."""
    timeouts, dying = timeouts or {}, dying or {}
    key = f"test-{os.getpid()}-{time.monotonic_ns()}"
    processes = {rank: subprocess.Popen(
        [sys.executable, "-c", RANK, key, str(rank), str(size), str(delay),
         str(timeouts.get(rank, timeout)), str(dying.get(rank, ""))],
        stdout=subprocess.PIPE, text=True, cwd=REPO) for rank, delay in ranks.items()}
    said = {}
    try:
        for rank, process in processes.items():
            out, _ = process.communicate(timeout=60)
            if rank in dying:
                assert process.returncode == 1
                continue
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
    tree = {100: ProcessStat("time", "S", 50, "7"), 50: ProcessStat("hydra_pmi_proxy", "S", 40, "42"),
            40: ProcessStat("mpiexec", "S", 1, "3")}
    monkeypatch.setattr(meeting, "process_stat", tree.get)
    monkeypatch.setattr(os, "getppid", lambda: 100)
    assert job_key() == "hydra-50-42"
    monkeypatch.setattr(os, "getppid", lambda: 50)
    assert job_key() == "hydra-50-42"
    monkeypatch.setattr(os, "getppid", lambda: 40)
    assert job_key() is None   # no proxy above: not started by Hydra
    chain = {pid: ProcessStat("sh", "S", pid - 1, "1") for pid in range(1000, 1010)}
    monkeypatch.setattr(meeting, "process_stat", chain.get)
    monkeypatch.setattr(os, "getppid", lambda: 1009)
    assert job_key() is None   # too far up to be this job's proxy


def test_the_key_under_open_mpi_is_its_job_namespace(monkeypatch):
    monkeypatch.setenv("PMIX_NAMESPACE", "prterun-node1-1234@1")
    key = job_key()
    assert key is not None and key.startswith("pmix-")
    monkeypatch.setenv("PMIX_NAMESPACE", "prterun-node1-1235@1")
    assert job_key() != key


def test_a_process_is_read_from_proc():
    found = process_stat(os.getpid())
    assert found is not None and found.parent == os.getppid() and not found.ended
    assert process_stat(-5) is None


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


def test_a_rank_that_dies_before_it_comes_ends_the_meeting_of_the_others():
    """Its socket is gone with it: the leader, looking every LOOK_PERIOD_S, tells the
    others, and every rank learns it (MPI_Init would wait for it for ever)."""
    said = meet({0: 0.0, 1: 2.0, 2: 0.0}, 3, dying={1: 0.3})
    assert [view.get("ended") for view in said.values()] == [1, 1]
    assert all(view["left"] - view["came"] < 1.5 for view in said.values())
    assert said[0]["cpu"] < 0.05 and said[2]["cpu"] < 0.05   # it looked, sleeping


def test_a_leader_that_dies_ends_the_meeting_of_the_others():
    """It dies before it comes (bound after 0.4 s, dead 0.2 s later)."""
    said = meet({0: 0.8, 1: 0.0, 2: 0.05}, 3, dying={0: 0.2})
    assert [view.get("ended") for view in said.values()] == [0, 0]
    assert all(view["left"] - view["came"] < 2 for view in said.values())
    assert said[1]["cpu"] < 0.05 and said[2]["cpu"] < 0.05


def test_a_rank_that_goes_on_at_its_own_bound_is_not_taken_for_ended():
    """It says so before it closes: the leader, waiting longer for a rank that never
    comes, goes on at its own bound, as the rank did, without ending the meeting."""
    said = meet({0: 0.0, 1: 0.5}, 3, timeouts={0: 1.2, 1: 0.25})
    assert [view.get("met") for view in said.values()] == [False, False]
    assert said[0]["left"] - said[0]["came"] > 1


def test_a_rank_that_dies_waiting_for_the_answer_ends_the_meeting_of_the_others():
    said = meet({0: 0.0, 1: 0.0, 2: 0.0, 3: 1.2}, 4, dying={2: 0.3})
    assert [view.get("ended") for view in said.values()] == [2, 2, 2]
    assert said[0]["left"] - said[0]["came"] < 1.1


def test_a_rank_that_comes_after_its_leader_went_on_does_not_take_it_for_ended():
    """The leader's answer, sent to every rank before it left, waits for the late one."""
    said = meet({0: 0.0, 1: 0.7}, 3, timeouts={0: 0.35, 1: 10.0})
    assert [view.get("met") for view in said.values()] == [False, False]
    assert said[1]["left"] - said[1]["came"] < 0.3


def test_the_leader_counts_the_ranks_that_mpichs_proxy_still_runs():
    """A rank may die before the leader could see it bound: under Hydra, the leader sees
    its proxy run one process fewer (a zombie is no longer one)."""
    ranks = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
             for _ in range(2)]
    place = Meeting(f"hydra-{os.getpid()}-1", 0, 2)   # this process plays the proxy
    elsewhere = Meeting(f"test-{os.getpid()}-{time.monotonic_ns()}", 0, 2)
    try:
        before = place._proxy_children()
        assert before is not None and before >= 2
        ranks[0].kill()
        deadline = time.monotonic() + 5
        while place._proxy_children() != before - 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert place._proxy_children() == before - 1   # not reaped yet: a zombie
        assert elsewhere._proxy_children() is None   # not under Hydra
    finally:
        place.close()
        elsewhere.close()
        for process in ranks:
            process.kill()
            process.wait()
