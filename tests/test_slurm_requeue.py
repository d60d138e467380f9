"""examples/slurm/requeue.sbatch: valid bash, the mpiexec line diel validate prints, and
(run with stand-ins for mpiexec, diel and scontrol) it passes Slurm's SIGUSR1 on to
mpiexec and requeues the job when the search stops with status 75, and only then."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers.launch import REPO, run_diel

SCRIPT = REPO / "examples" / "slurm" / "requeue.sbatch"

# mpiexec's stand-in: says it runs, then exits with $FAKE_STATUS, or 75 at SIGUSR1.
MPIEXEC = """#!/bin/bash
echo "mpiexec $*" >> "$CALLS"
trap 'echo "mpiexec got USR1" >> "$CALLS"; exit 75' USR1
touch "$RUNNING"
if [ -n "$FAKE_STATUS" ]; then exit "$FAKE_STATUS"; fi
for _ in $(seq 300); do sleep 0.1; done
"""
RECORDER = '#!/bin/bash\necho "$(basename "$0") $*" >> "$CALLS"\n'


def submit_dir(tmp_path: Path) -> Path:
    """A submission folder whose .venv/bin/activate puts the stand-ins first on PATH."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    for name, text in (("mpiexec", MPIEXEC), ("diel", RECORDER), ("scontrol", RECORDER)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    activate = tmp_path / ".venv" / "bin" / "activate"
    activate.parent.mkdir(parents=True)
    activate.write_text(f'export PATH="{bin_dir}:$PATH"\n')
    return tmp_path


def start(tmp_path: Path, status: str = "") -> subprocess.Popen:
    env = {**os.environ, "SLURM_SUBMIT_DIR": str(submit_dir(tmp_path)), "SLURM_JOB_ID": "42",
           "CALLS": str(tmp_path / "calls"), "RUNNING": str(tmp_path / "running"),
           "FAKE_STATUS": status}
    return subprocess.Popen(["bash", str(SCRIPT)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def calls(tmp_path: Path) -> list[str]:
    return (tmp_path / "calls").read_text().splitlines()


def test_the_script_parses_and_runs_the_line_diel_validate_prints():
    assert subprocess.run(["bash", "-n", str(SCRIPT)], timeout=30).returncode == 0
    result = run_diel("validate", "examples/slurm/search.yaml", timeout=60)
    suggested = re.search(r"^run it with: (mpiexec .*)$", result.stdout, re.MULTILINE).group(1)
    runs = [line.strip().rstrip("&").strip() for line in SCRIPT.read_text().splitlines()
            if re.match(r"\s*mpiexec .* diel run ", line)]
    assert runs == [suggested]


def test_sigusr1_is_passed_to_mpiexec_and_a_stopped_search_is_requeued(tmp_path):
    job = start(tmp_path)
    deadline = time.monotonic() + 30
    while not (tmp_path / "running").exists():
        assert time.monotonic() < deadline and job.poll() is None, job.stdout.read()
        time.sleep(0.05)
    job.send_signal(signal.SIGUSR1)   # what Slurm sends the batch shell (B:) at the limit
    output, _ = job.communicate(timeout=30)
    assert job.returncode == 0, output
    assert calls(tmp_path) == ["mpiexec -n 10 diel run examples/slurm/search.yaml",
                               "mpiexec got USR1", "scontrol requeue 42"]


@pytest.mark.parametrize("status, expected, after", [("0", 0, ["diel results"]),
                                                     ("1", 1, []), ("2", 2, [])])
def test_a_search_that_ends_otherwise_is_not_requeued(tmp_path, status, expected, after):
    job = start(tmp_path, status)
    output, _ = job.communicate(timeout=30)
    assert job.returncode == expected, output
    assert [call.split(" examples")[0] for call in calls(tmp_path)[1:]] == after
