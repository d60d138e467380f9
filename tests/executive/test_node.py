"""A rank's share of its node from the launcher's environment, before MPI starts
(:func:`diel.executive.node.share_node_early`): the same thread rule and variables as the
collective :func:`~diel.executive.node.share_node`, and nothing where the launcher does
not tell the place."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from diel.executive import node
from diel.executive.node import NodeShare, THREAD_VARIABLES, local_place, share_node_early
from tests.helpers.launch import REPO

EXPORTED = THREAD_VARIABLES + ("DIEL_LOCAL_RANK", "DIEL_LOCAL_SIZE")


@pytest.fixture
def clean(monkeypatch):
    """No launcher's place, no thread count, no DIEL_LOCAL_* in the environment; what
    share_node_early exports is taken back after the test (set first, so that monkeypatch
    records even a variable that was absent: its delenv of one records nothing)."""
    for name in (*(name for pair in node.LOCAL_VARIABLES for name in pair), *EXPORTED):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    return monkeypatch


@pytest.mark.parametrize("environment, place", [
    ({"MPI_LOCALRANKID": "2", "MPI_LOCALNRANKS": "3"}, (2, 3)),
    ({"OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}, (0, 4)),
    ({"MPI_LOCALRANKID": "1"}, None),
    ({"MPI_LOCALRANKID": "3", "MPI_LOCALNRANKS": "3"}, None),
    ({"MPI_LOCALRANKID": "one", "MPI_LOCALNRANKS": "3"}, None),
    ({}, None),
])
def test_the_place_on_the_node_is_told_by_the_launchers_environment(clean, environment, place):
    for name, value in environment.items():
        clean.setenv(name, value)
    assert local_place() == place


def test_the_share_from_the_launcher_splits_the_cores_and_exports_the_place(clean):
    clean.setenv("MPI_LOCALRANKID", "1")
    clean.setenv("MPI_LOCALNRANKS", "3")
    assert share_node_early() == NodeShare(local_rank=1, local_size=3, threads=2)
    assert [os.environ[name] for name in EXPORTED] == ["2", "2", "2", "1", "3"]


def test_a_thread_count_the_user_set_is_kept_before_mpi_too(clean):
    clean.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0")
    clean.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2")
    clean.setenv("OPENBLAS_NUM_THREADS", "3")
    assert share_node_early().threads == 3
    assert os.environ["OMP_NUM_THREADS"] == "3"


def test_without_the_launchers_place_nothing_is_shared_before_mpi(clean):
    assert share_node_early() is None
    assert [name for name in EXPORTED if name in os.environ] == []


def test_the_module_starts_no_mpi_as_it_is_imported():
    done = subprocess.run([sys.executable, "-c", "import sys, diel.executive.node; "
                           "print('mpi4py.MPI' in sys.modules)"],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.stdout.strip() == "False", done.stderr
