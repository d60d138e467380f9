"""examples/slurm: the sbatch script is valid bash, and launches the example workflow
with exactly the mpiexec line `diel validate` prints for it."""

from __future__ import annotations

import re
import subprocess

from tests.helpers.launch import REPO, run_diel_in_process

SCRIPT = REPO / "examples" / "slurm" / "search.sbatch"
WORKFLOW = "examples/slurm/search.yaml"


def test_the_sbatch_script_parses():
    result = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 0, result.stderr


def test_its_mpiexec_line_is_the_one_diel_validate_prints():
    result = run_diel_in_process("validate", WORKFLOW)
    assert result.returncode == 0, result.stderr
    suggested = re.search(r"^run it with: (mpiexec -n (\d+) .*)$", result.stdout, re.MULTILINE)
    lines = SCRIPT.read_text().splitlines()
    runs = [line.strip() for line in lines if re.match(r"\s*mpiexec .* diel run ", line)]
    assert runs == [suggested.group(1)]
    # every other mpiexec of the script starts as many ranks
    assert {m.group(1) for line in lines if (m := re.match(r"\s*mpiexec -n (\d+)", line))} == \
        {suggested.group(2)}
    # Slurm gives the job room for them: the first node takes two more ranks than the
    # others (the tuple space and the master), the workers one GPU each.
    directives = dict(re.findall(r"^#SBATCH --([\w-]+)=(\S+)", SCRIPT.read_text(), re.MULTILINE))
    nodes, slots, gpus = (int(directives[key]) for key in
                          ("nodes", "ntasks-per-node", "gpus-per-node"))
    ranks = int(suggested.group(2))
    assert ranks == 2 + nodes * gpus and slots == gpus + 2 and ranks <= nodes * slots
