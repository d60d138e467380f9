"""Large chunks kept in memory files: a reader on the server's node maps them (no copy),
falls back to the bytes where the file will not open, and the server lets a file go only
once nothing refers to it (the store, a grant not yet acknowledged)."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

import tuplespace.server
from tuplespace import SpaceTimeoutError, memfiles
from tuplespace.protocol import READ, READ_MAP

from tests.helpers.launch import run_mpi
from tests.helpers.tuplespace import InProcSpace

pytestmark = pytest.mark.skipif(not memfiles.supported(), reason="no memory files (not Linux)")

MIB = 1 << 20


@pytest.fixture
def one_server():
    space = InProcSpace(n_servers=1, n_clients=2)
    yield space
    if any(t.is_alive() for t in space.threads):
        space.stop()


def big(fill: float = 1.0) -> np.ndarray:
    return np.full(MIB // 8 + 5, fill)   # a little over 1 MiB of float64


def round_trip(client) -> None:
    """Wait until the server has handled everything this client sent before."""
    client.tput("sync/x", 1)
    client.tget("sync/x", timeout=5)


def chunk_files() -> int:
    """The maps of the servers' memory files in this process (servers and readers)."""
    with open("/proc/self/maps") as maps:
        return sum("memfd:tuplespace-chunk" in line for line in maps)


def chunk_files_before() -> int:
    """:func:`chunk_files` as a test starts, for it to compare with: what another test run
    before it in this process (a pytest-xdist worker) still holds is not this test's."""
    gc.collect()
    return chunk_files()


def test_a_read_on_the_servers_node_maps_its_file_instead_of_a_copy(one_server):
    writer, reader = one_server.clients
    writer.dist_tput("ck/1", big(3.0))
    got = reader.dist_tread("ck/1", timeout=5)
    assert got.shape == big().shape and (got == 3.0).all() and got.flags.writeable
    assert reader.dist_reads == {"mapped": 1, "copied": 0}
    one_server.stop()
    assert one_server.stats[0]["maps_granted"] == 1


def test_a_restored_array_changed_by_its_reader_leaves_the_stored_one_as_it_was(one_server):
    writer, reader = one_server.clients
    writer.dist_tput("ck/1", big(3.0))
    got = reader.dist_tread("ck/1", timeout=5)
    got[:] = -1.0   # copy on write: the reader's own pages now
    assert (reader.dist_tread("ck/1", timeout=5) == 3.0).all()
    assert (writer.dist_tget("ck/1", timeout=5) == 3.0).all()
    assert (got == -1.0).all()


def test_the_servers_file_is_sealed_against_every_change(one_server):
    writer, reader = one_server.clients
    writer.dist_tput("ck/1", big())
    fd = reader.dist_open("ck/1", timeout=5)
    try:
        assert os.fstat(fd).st_size == big().nbytes
        writable = os.open(f"/proc/self/fd/{fd}", os.O_RDWR)
        try:
            with pytest.raises(PermissionError):
                os.pwrite(writable, b"x", 0)
            with pytest.raises(PermissionError):
                os.ftruncate(writable, 10)
        finally:
            os.close(writable)
    finally:
        os.close(fd)


def test_where_the_file_will_not_open_the_bytes_come_and_the_server_is_asked_no_more(one_server, monkeypatch):
    writer, reader = one_server.clients
    monkeypatch.setattr(memfiles, "open_granted", lambda grant: None)   # e.g. a hardened /proc
    writer.dist_tput("ck/1", big(2.0))
    assert (reader.dist_tread("ck/1", timeout=5) == 2.0).all()
    assert (reader.dist_tread("ck/1", timeout=5) == 2.0).all()
    assert reader.dist_open("ck/1", timeout=5) is None
    assert reader.dist_reads == {"mapped": 0, "copied": 2}
    round_trip(reader)
    server = one_server.server_objs[0]
    assert server.maps_granted == 1 and server._grants == {}   # the one grant was given back


def test_small_arrays_several_chunks_and_an_out_array_are_copied(monkeypatch):
    space = InProcSpace(n_servers=2, n_clients=1)
    try:
        client = space.clients[0]
        client.dist_tput("ck/split", big())           # two chunks of half a MiB each
        client.dist_tput("ck/small", np.ones(1000))
        assert (client.dist_tread("ck/split", timeout=5) == 1.0).all()
        assert client.dist_open("ck/split", timeout=5) is None
        assert client.dist_tread("ck/small", timeout=5).sum() == 1000
        monkeypatch.setattr(memfiles, "MAP_MIN_BYTES", 1000)
        client.dist_tput("ck/mapped", np.ones(4000))   # two chunks of 16 kB, in memory files
        out = np.zeros(4000)
        assert client.dist_tread("ck/mapped", timeout=5, out=out) is out and out.sum() == 4000
        assert client.dist_reads == {"mapped": 0, "copied": 3}
    finally:
        space.stop()


def test_a_grant_keeps_a_taken_file_open_until_its_reader_has_opened_it(one_server):
    writer, reader = one_server.clients
    before = chunk_files_before()
    writer.dist_tput("ck/1", big(5.0))
    _, plan = reader._plan(READ, "ck/1", 5, "test")[1]
    server, ctag, _, _ = plan[0]
    grant = reader._request(server, READ_MAP, ctag, 0, "test").arg
    assert (writer.dist_tget("ck/1", timeout=5) == 5.0).all()   # taken before the reader opens it
    gc.collect()
    fd = memfiles.open_granted(grant)
    assert fd is not None
    try:
        assert (np.frombuffer(memfiles.map_private(fd, grant.nbytes), np.float64) == 5.0).all()
    finally:
        os.close(fd)
    reader._t.send(server, tuplespace.server.OPENED, 0, None, grant.number)
    round_trip(reader)
    gc.collect()
    assert memfiles.open_granted(grant) is None   # nothing refers to it now: closed
    assert chunk_files() == before


def test_a_grant_never_given_back_is_dropped_after_its_time(one_server, monkeypatch):
    writer, reader = one_server.clients
    monkeypatch.setattr(tuplespace.server, "GRANT_SECONDS", 0.0)
    writer.dist_tput("ck/1", big())
    writer.dist_tput("ck/2", big())
    _, plan = reader._plan(READ, "ck/1", 5, "test")[1]
    lost = reader._request(plan[0][0], READ_MAP, plan[0][1], 0, "test").arg   # its reader died
    writer.dist_tget("ck/1", timeout=5)
    assert reader.dist_tread("ck/2", timeout=5).sum() > 0   # the next grant sweeps the old one
    gc.collect()
    assert memfiles.open_granted(lost) is None


def test_many_reads_leave_no_descriptor_and_no_map_behind(one_server):
    writer, reader = one_server.clients
    before = chunk_files_before()
    writer.dist_tput("ck/1", big())
    reader.dist_tread("ck/1", timeout=5)
    gc.collect()
    descriptors, maps = len(os.listdir("/proc/self/fd")), chunk_files()
    for _ in range(200):
        assert reader.dist_tread("ck/1", timeout=5)[-1] == 1.0
        os.close(reader.dist_open("ck/1", timeout=5))
    round_trip(reader)
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) == descriptors and chunk_files() == maps
    assert one_server.server_objs[0]._grants == {}
    writer.dist_tget("ck/1", timeout=5)
    round_trip(writer)   # the server thread has let go of the file it handed over
    gc.collect()
    assert chunk_files() == before


def test_dist_open_of_nothing_stored_times_out(one_server):
    with pytest.raises(SpaceTimeoutError, match=r"dist_open\('ck/none'\): no distributed array"):
        one_server.clients[0].dist_open("ck/none", timeout=0)


@pytest.mark.mpi
def test_over_mpi_a_reader_maps_another_processs_file_and_so_does_a_child_it_passes_it_to():
    proc = run_mpi(2, ["tests/tuplespace/mpi_mapped.py"], timeout=90)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    lines = set(proc.stdout.split("\n"))
    assert {"MAPPED 1 0 True", "CHILD 7.0 True", "FALLBACK 0 1 True"} <= lines, proc.stdout
