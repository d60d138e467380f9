"""A results database on a network file system: found from the mount table (a fake one
here, standing in for /proc/self/mounts on a cluster) and written in the rollback
journal mode, since SQLite's WAL mode is unsafe there (docs/clusters.md). And a database
whose file system is full: one line, nothing lost (tests/search/test_workers_mpi.py runs
a search onto a real full tmpfs where it may mount one)."""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
from datetime import datetime, timezone
from pathlib import Path

import pytest
from sqlalchemy import event

import diel.results
from diel.errors import DatabaseUnwritable, ResultsError
from diel.results import Lease, ResultRecord, ResultsStore, TrialStart
from diel.results import _filesystem
from diel.results._filesystem import Mount, mount_of, network_mount
from diel.results._store import storage_fault

CLUSTER = """\
rootfs / rootfs rw 0 0
/dev/sda1 / ext4 rw,relatime 0 0
tmpfs /tmp tmpfs rw,nosuid,nodev 0 0
nas01:/export/home /home nfs4 rw,relatime,vers=4.2,hard,proto=tcp 0 0
10.0.0.5@o2ib:/scratch /scratch lustre rw,flock,lazystatfs 0 0
/dev/sdb1 /scratch/local xfs rw,relatime 0 0
gpfs1 /gpfs/projects gpfs rw,relatime 0 0
//fileserver/share /mnt/my\\040share cifs rw,vers=3.0 0 0
user@host:/data /mnt/sshfs fuse.sshfs rw,nosuid,nodev 0 0
"""


@pytest.fixture
def table(tmp_path) -> Path:
    path = tmp_path / "mounts"
    path.write_text(CLUSTER)
    return path


@pytest.mark.parametrize("path, expected", [
    ("/home/ada/wf/wf.db", Mount("/home", "nfs4")),
    ("/home", Mount("/home", "nfs4")),
    ("/homework/wf.db", Mount("/", "ext4")),                     # a prefix of the name only
    ("/scratch/ada/not/made/yet.db", Mount("/scratch", "lustre")),
    ("/scratch/local/ada/wf.db", Mount("/scratch/local", "xfs")),  # the longest mount point
    ("/gpfs/projects/p1/wf.db", Mount("/gpfs/projects", "gpfs")),
    ("/mnt/my share/wf.db", Mount("/mnt/my share", "cifs")),     # \040 is a space
    ("/mnt/sshfs/wf.db", Mount("/mnt/sshfs", "fuse.sshfs")),
    ("/opt/wf.db", Mount("/", "ext4")),
])
def test_the_longest_mount_point_holding_the_path(table, path, expected):
    assert mount_of(path, table) == expected


def test_network_file_systems(table):
    found = {path: network_mount(path, table) for path in
             ["/home/a.db", "/scratch/a.db", "/gpfs/projects/a.db", "/mnt/my share/a.db",
              "/mnt/sshfs/a.db", "/scratch/local/a.db", "/opt/a.db", "/tmp/a.db"]}
    assert {path: mount.type for path, mount in found.items() if mount} == {
        "/home/a.db": "nfs4", "/scratch/a.db": "lustre", "/gpfs/projects/a.db": "gpfs",
        "/mnt/my share/a.db": "cifs", "/mnt/sshfs/a.db": "fuse.sshfs"}
    for kind in ["nfs", "beegfs", "ceph", "glusterfs", "fuse.glusterfs", "smb3"]:
        assert Mount("/x", kind).network, kind
    for kind in ["ext4", "xfs", "btrfs", "zfs", "tmpfs", "overlay"]:
        assert not Mount("/x", kind).network, kind


def test_an_unreadable_mount_table_means_a_local_file_system(tmp_path):
    assert mount_of("/home/a.db", tmp_path / "no-such-table") is None
    assert network_mount("/home/a.db", tmp_path / "no-such-table") is None


def test_a_symlink_is_judged_where_it_leads(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    (tmp_path / "link").symlink_to(shared)
    table = tmp_path / "mounts"
    table.write_text(f"/dev/sda1 / ext4 rw 0 0\nnas:/e {os.path.realpath(shared)} nfs rw 0 0\n")
    assert network_mount(tmp_path / "link" / "wf.db", table).type == "nfs"


def on_nfs(monkeypatch, folder: Path) -> None:
    """Make ``folder`` look like an NFS mount to diel (the rest of / is ext4)."""
    table = folder.parent / f"{folder.name}-mounts"
    table.write_text(f"/dev/sda1 / ext4 rw 0 0\nnas:/export {os.path.realpath(folder)} nfs4 "
                     "rw,vers=4.2 0 0\n")
    monkeypatch.setattr(_filesystem, "MOUNTS", table)


def journal(path: Path) -> str:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute("PRAGMA journal_mode").fetchone()[0]
    finally:
        conn.close()


def write_some(store: ResultsStore, name: str = "wf") -> None:
    state = store.open_study(name, "grid", "accuracy", "maximize", {})
    store.record(state.study_id, starts=[TrialStart(0, {"x": 1}, '{"x":1}')])
    store.record(state.study_id, results=[ResultRecord(0, "ok", 0.5, accuracy=0.5)])


def test_the_master_writes_a_database_on_nfs_with_the_rollback_journal(tmp_path, monkeypatch,
                                                                       caplog):
    folder = tmp_path / "home"
    folder.mkdir()
    on_nfs(monkeypatch, folder)
    path = folder / "wf.db"
    with caplog.at_level(logging.WARNING, logger="diel.results"):
        store = ResultsStore(f"sqlite:///{path}")
    try:
        write_some(store)
        assert journal(path) == "delete"
        assert not path.with_name("wf.db-wal").exists()
        assert not path.with_name("wf.db-shm").exists()
        with diel.results.open(path) as results:      # a reader while the master runs
            assert [t["objective"] for t in results.trials()] == [0.5]
    finally:
        store.close()
    assert f"results database {path} is on a nfs4 file system (mounted at " \
           f"{os.path.realpath(folder)}): SQLite uses its rollback journal" in caplog.text


def test_on_a_local_file_system_the_journal_stays_wal(tmp_path, monkeypatch, caplog):
    table = tmp_path / "mounts"
    table.write_text("/dev/sda1 / ext4 rw 0 0\n")
    monkeypatch.setattr(_filesystem, "MOUNTS", table)
    store = ResultsStore(f"sqlite:///{tmp_path / 'wf.db'}")
    try:
        write_some(store)
    finally:
        store.close()
    assert journal(tmp_path / "wf.db") == "wal"
    assert "rollback journal" not in caplog.text


def test_a_wal_database_moved_to_nfs_leaves_wal_mode(tmp_path, monkeypatch):
    folder = tmp_path / "home"
    folder.mkdir()
    path = folder / "wf.db"
    store = ResultsStore(f"sqlite:///{path}")      # made on a local disk
    write_some(store, "first")
    store.close()
    assert journal(path) == "wal"
    on_nfs(monkeypatch, folder)
    store = ResultsStore(f"sqlite:///{path}")
    try:
        write_some(store, "second")
    finally:
        store.close()
    assert journal(path) == "delete" and not path.with_name("wf.db-wal").exists()
    with diel.results.open(path) as results:
        assert [s["name"] for s in results.studies()] == ["first", "second"]


def test_a_wal_database_on_nfs_held_open_by_a_reader_is_refused(tmp_path, monkeypatch):
    folder = tmp_path / "home"
    folder.mkdir()
    path = folder / "wf.db"
    store = ResultsStore(f"sqlite:///{path}")
    write_some(store)
    store.close()
    reader = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    reader.execute("SELECT count(*) FROM trials").fetchall()   # keeps the WAL files in use
    on_nfs(monkeypatch, folder)
    try:
        with pytest.raises(ResultsError, match="is on a nfs4 file system, where WAL mode is "
                                               "unsafe, and cannot leave wal mode while "
                                               "another process has it open"):
            ResultsStore(f"sqlite:///{path}")
    finally:
        reader.close()


def full_disk(store: ResultsStore, error: Exception) -> None:
    """From now on every write of ``store``'s database fails with ``error``, as SQLite's
    driver raises it when the disk or quota is full."""
    def refuse(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE")):
            raise error
    event.listen(store.db.engine, "before_cursor_execute", refuse)


def driver_error(message: str, code: int) -> sqlite3.OperationalError:
    error = sqlite3.OperationalError(message)
    error.sqlite_errorcode = code
    return error


@pytest.mark.parametrize("error, why", [
    (driver_error("database or disk is full", sqlite3.SQLITE_FULL), "disk full (or quota exceeded)"),
    (sqlite3.OperationalError("database or disk is full"), "disk full (or quota exceeded)"),
    (driver_error("disk I/O error", sqlite3.SQLITE_IOERR_WRITE),
     "a write failed (disk I/O error: an exceeded quota, or a failing disk)"),
])
def test_a_full_disk_is_one_line_and_loses_nothing(tmp_path, error, why):
    path = tmp_path / "wf.db"
    store = ResultsStore(f"sqlite:///{path}")
    write_some(store)
    state = store.open_study("wf", "grid", "accuracy", "maximize", {})
    full_disk(store, error)
    try:
        with pytest.raises(DatabaseUnwritable) as refused:
            store.record(state.study_id, starts=[TrialStart(1, {"x": 2}, '{"x":2}')])
        with pytest.raises(DatabaseUnwritable):
            store.heartbeat(Lease("wf", "run", "host", 1, datetime.now(timezone.utc)))
    finally:
        store.close()
    assert str(refused.value) == (f"the results database {path} could not be written: {why}; "
                                  "nothing finished is lost: free space and run the same "
                                  "command again to resume")
    assert refused.value.__cause__ is None and refused.value.__suppress_context__
    with diel.results.open(path) as results:   # what was committed is all there
        assert [(t["number"], t["status"]) for t in results.trials()] == [(0, "ok")]


def test_other_database_errors_are_not_taken_for_a_full_disk():
    assert storage_fault(sqlite3.OperationalError("database is locked")) is None
    assert storage_fault(ResultsError("x")) is None
    chained = ResultsError("results database x: (sqlite3.OperationalError) ...")
    chained.__cause__ = OSError(errno.EDQUOT, "Disk quota exceeded")
    assert storage_fault(chained) == "disk full (or quota exceeded)"
    postgres = Exception("could not extend file: No space left on device")
    postgres.sqlstate = "53100"
    assert storage_fault(postgres) == "disk full (or quota exceeded)"
