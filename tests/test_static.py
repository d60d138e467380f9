"""The static check CI relies on: pyflakes' rules over the whole tree, so an undefined
name in a path no test reaches here (a GPU-only branch, say) fails on a CPU machine."""

from __future__ import annotations

import subprocess
import sys

from tests.support import REPO


def test_pyflakes_rules_pass() -> None:
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--select", "F",
                           "--output-format", "concise", str(REPO)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert "No module named ruff" not in done.stderr, \
        "ruff is missing: pip install -e '.[test]' installs it"
    assert done.returncode == 0, done.stdout + done.stderr
