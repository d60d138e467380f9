"""Another installed package adds a module through the entry-point group diel.modules."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers.launch import REPO


def test_a_plugin_package_provides_a_builtin_module(tmp_path):
    package = tmp_path / "diel_plugin_demo"
    package.mkdir()
    (package / "__init__.py").write_text(
        "def main(ctx):\n    print('plugin module ran on rank', ctx.rank, flush=True)\n")
    dist = tmp_path / "diel_plugin_demo-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: diel-plugin-demo\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[diel.modules]\nhello = diel_plugin_demo:main\n")
    workflow = tmp_path / "wf.yaml"
    workflow.write_text("modules:\n  greeter: {function: hello}\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    ran = subprocess.run([sys.executable, "-m", "diel", "run", str(workflow)], capture_output=True,
                         text=True, timeout=60, env=env, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert "plugin module ran on rank 0" in ran.stdout
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("modules:\n  greeter: {function: helo}\n")
    refused = subprocess.run([sys.executable, "-m", "diel", "validate", str(unknown)],
                             capture_output=True, text=True, timeout=60, env=env)
    assert refused.returncode == 2
    assert "installed builtins: hello, search, trainer, tuplespace" in refused.stderr
