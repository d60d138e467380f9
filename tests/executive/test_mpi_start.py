"""MPI's start for ``diel run`` (diel.executive.mpi_start): on one node, MPICH built with
UCX and OFI starts with OFI and loads UCX with its cheaper memory hooks, unless the user
chose; MPI still ends at exit."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys

import pytest

from diel.executive.mpi_start import _has_both_netmods, _loopback_up, _ours_to_choose
from tests.helpers.launch import REPO, find_mpiexec, run_diel, run_mpi

WHEEL = ("MPICH Version:      5.0.2\nMPICH Release date: Fri Sep 25 20:45:26 UTC 2026\n"
         "MPICH ABI:          18:2:6\nMPICH Device:       ch4:ucx ofi\n"
         "MPICH configure:    --with-device=ch4:ucx,ofi --with-pm=hydra:gforker\n")
ONE_NODE = {"PATH": "/bin", "PMI_RANK": "2", "PMI_SIZE": "6", "MPI_LOCALNRANKS": "6",
            "MPI_LOCALRANKID": "2", "OMP_NUM_THREADS": "1"}


def test_on_one_node_with_nothing_chosen_diel_chooses_and_the_wheel_has_both_netmods():
    assert _ours_to_choose(ONE_NODE, True)
    assert _has_both_netmods(WHEEL)


@pytest.mark.parametrize("device", ["ch4:ofi", "ch4:ucx", "ch3:nemesis", "ch4:ucx,ofi"])
def test_a_library_that_may_lack_ofi_or_ucx_keeps_its_choice(device):
    library = WHEEL.replace("ch4:ucx ofi", device, 1)
    assert _has_both_netmods(library) == (device == "ch4:ucx,ofi")


def test_another_mpi_keeps_its_choice():
    library = "Open MPI v5.0.5, package: Open MPI builder Distribution, ident: 5.0.5"
    assert not _has_both_netmods(library)


@pytest.mark.parametrize("name, value", [
    ("MPIR_CVAR_CH4_NETMOD", "ucx"), ("MPICH_CH4_NETMOD", "ucx"), ("MPIR_PARAM_CH4_NETMOD", "ofi"),
    ("MPIR_CVAR_NOLOCAL", "1"), ("MPICH_NUM_CLIQUES", "2"), ("MPIR_CVAR_ODD_EVEN_CLIQUES", "1"),
    ("UCX_TLS", "sm,self"), ("FI_PROVIDER", "verbs"),
])
def test_a_user_who_set_a_netmod_variable_keeps_mpich_s_choice(name, value):
    assert not _ours_to_choose({**ONE_NODE, name: value}, True)


@pytest.mark.parametrize("change", [
    {"MPI_LOCALNRANKS": "3"},            # the job spans two nodes
    {"MPI_LOCALNRANKS": None},           # another launcher: where the ranks are is unknown
    {"PMI_SIZE": None},
    {"MPI_LOCALNRANKS": "six"},
])
def test_ranks_on_several_nodes_or_an_unknown_launcher_keep_mpich_s_choice(change):
    environ = {**ONE_NODE, **change}
    environ = {name: value for name, value in environ.items() if value is not None}
    assert not _ours_to_choose(environ, True)


def _network_namespaces() -> bool:
    """Whether this user may run a command in a new network namespace (``unshare -rn``)."""
    try:
        return shutil.which("unshare") is not None and subprocess.run(
            ["unshare", "-rn", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def test_with_the_loopback_interface_down_mpich_keeps_its_choice():
    assert not _ours_to_choose(ONE_NODE, False)


def test_the_loopback_interface_is_up_here_and_down_in_a_new_network_namespace():
    if not _network_namespaces():
        pytest.skip("unshare -rn is not allowed here")
    assert _loopback_up()
    inside = subprocess.run(["unshare", "-rn", sys.executable, "-c",
                             "from diel.executive.mpi_start import _loopback_up; "
                             "print(_loopback_up())"],
                            capture_output=True, text=True, timeout=30, cwd=REPO)
    assert inside.stdout.strip() == "False", inside.stderr


WORKFLOW = """
modules:
  space: {function: tuplespace}
  first: {function: 'tests.executive.probes:nothing'%s}
services: [space]
"""
# MPICH describes the netmod it started when asked: OFI names its libfabric provider.
SUMMARY = {"MPIR_CVAR_DEBUG_SUMMARY": "1"}


@pytest.mark.mpi
def test_a_diel_run_on_one_node_starts_mpi_with_ofi_and_still_exits_0_or_2(tmp_path):
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(WORKFLOW % "")
    bad.write_text(WORKFLOW % ", sze: 1")
    ran = run_mpi(2, ["-m", "diel", "run", str(good)], timeout=90, env=SUMMARY)
    assert ran.returncode == 0, ran.stderr
    assert "libfabric provider" in ran.stdout and "UCX netmod" not in ran.stdout
    refused = run_diel("run", str(bad), n=2, timeout=90)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.count("diel: error:") == 1, refused.stderr
    assert "BAD TERMINATION" not in refused.stdout + refused.stderr


# Hydra's fork launcher runs each "host"'s proxy here: ranks on two nodes, as Hydra tells it.
TWO_NODES = ["-launcher", "fork", "-hosts", "localhost,127.0.0.1", "-ppn", "1"]


@pytest.mark.mpi
@pytest.mark.parametrize("env, options", [({"MPIR_CVAR_CH4_NETMOD": "ucx"}, []),
                                          ({}, TWO_NODES)], ids=["user-s-netmod", "two-nodes"])
def test_mpich_chooses_where_the_user_did_or_the_ranks_are_on_several_nodes(env, options):
    ran = run_mpi(2, [*options, sys.executable, "-c",
                      "from diel.executive.mpi_start import start_mpi; start_mpi()"],
                  timeout=60, env={**SUMMARY, **env})
    assert ran.returncode == 0, ran.stderr
    assert "UCX netmod" in ran.stdout and "libfabric provider" not in ran.stdout


# mpi4py.MPI imported before, not starting MPI (as diel validate does); rank 0 then ends
# at once with status 2, rank 1 a second later. Unfinalized, rank 0's end kills rank 1.
IMPORTED_BEFORE = """
import os, sys, time
import mpi4py
mpi4py.rc.initialize = False
from mpi4py import MPI
from diel.executive.mpi_start import start_mpi
assert start_mpi() is MPI and MPI.Query_thread() == MPI.THREAD_SERIALIZED
# one write a line: mpiexec interleaves the ranks' output write by write (print's are several)
netmod = os.environ.get("MPIR_CVAR_CH4_NETMOD")
os.write(1, f"netmod variable after the start: {netmod}\\n".encode())
if MPI.COMM_WORLD.rank == 1:
    time.sleep(1)
    os.write(1, b"rank 1 ends\\n")
sys.exit(2 if MPI.COMM_WORLD.rank == 0 else 0)
"""


@pytest.mark.mpi
def test_mpi_imported_before_is_started_as_configured_and_finalized_at_exit():
    ran = run_mpi(2, [sys.executable, "-c", IMPORTED_BEFORE], timeout=60,
                  env={**SUMMARY, "MPI4PY_RC_THREAD_LEVEL": "serialized"})
    assert ran.returncode == 2, ran.stderr
    assert "rank 1 ends" in ran.stdout, ran.stdout + ran.stderr
    assert "libfabric provider" in ran.stdout
    assert ran.stdout.count("netmod variable after the start: None") == 2, ran.stdout


# Which way UCX installed its memory hooks as the library loaded: "bistro" patches the code
# of the C library's munmap to jump to UCX's (its first byte becomes 0xe9, a jmp); "reloc"
# leaves that code as it was. And whether the variable was taken back after the start.
HOOKS = """
import ctypes, os
from diel.executive.mpi_start import start_mpi
start_mpi()
munmap = ctypes.cast(ctypes.CDLL("libc.so.6").munmap, ctypes.c_void_p).value
patched = ctypes.string_at(munmap, 1) == b"\\xe9"
variable = os.environ.get("UCX_MEM_MMAP_HOOK_MODE")
os.write(1, f"munmap patched: {patched}; hook variable after the start: {variable}\\n".encode())
"""


@pytest.mark.mpi
@pytest.mark.skipif(platform.machine() != "x86_64",
                    reason="UCX's patch is told by x86's jump instruction (0xe9)")
@pytest.mark.parametrize("env, patched", [({}, False), ({"MPIR_CVAR_CH4_NETMOD": "ucx"}, True)],
                         ids=["diel-s-choice", "user-s-netmod"])
def test_on_one_node_ucx_loads_without_patching_the_c_library_unless_the_user_chose(env, patched):
    ran = run_mpi(2, [sys.executable, "-c", HOOKS], timeout=60, env=env)
    assert ran.returncode == 0, ran.stderr
    line = f"munmap patched: {patched}; hook variable after the start: None"
    assert ran.stdout.count(line) == 2, ran.stdout + ran.stderr


@pytest.mark.mpi
def test_with_no_loopback_interface_up_mpi_starts_and_ends_as_mpich_chooses():
    """A new network namespace has its loopback interface down; OFI's MPI_Finalize fails
    there (status 15), UCX's does not."""
    if not _network_namespaces():
        pytest.skip("unshare -rn is not allowed here")
    env = {**os.environ, **SUMMARY, "PYTHONPATH": str(REPO)}
    ran = subprocess.run(["unshare", "-rn", find_mpiexec(), "-n", "2", sys.executable, "-c",
                          "from diel.executive.mpi_start import start_mpi; start_mpi()"],
                         capture_output=True, text=True, timeout=60, env=env)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr
    assert "UCX netmod" in ran.stdout and "libfabric provider" not in ran.stdout
