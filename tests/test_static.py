"""The static checks CI relies on: pyflakes' rules over the whole tree, so an undefined
name in a path no test reaches here (a GPU-only branch, say) fails on a CPU machine; and
the layout of the tests themselves (helpers in tests/helpers, mpiexec behind its marker)."""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.launch import REPO

# One worker runs this module, so that each file is parsed once (_imported_modules).
pytestmark = pytest.mark.xdist_group("static")


def test_pyflakes_rules_pass() -> None:
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--select", "F",
                           "--output-format", "concise", str(REPO)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert "No module named ruff" not in done.stderr, \
        "ruff is missing: pip install -e '.[test]' installs it"
    assert done.returncode == 0, done.stdout + done.stderr


@functools.lru_cache(maxsize=None)
def _imported_modules(path: Path) -> tuple[str, ...]:
    """The dotted names ``path`` imports: each module, and each name taken from one
    (``from tests.search import test_master`` imports ``tests.search.test_master``)."""
    package = ".".join(path.relative_to(REPO).with_suffix("").parts[:-1])
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(part for part in (base, node.module) if part)
            found += [module] + [f"{module}.{alias.name}" for alias in node.names]
    return tuple(found)


def test_no_test_module_imports_another_or_a_conftest() -> None:
    """Shared helpers live in tests/helpers; fixtures reach tests through conftest.py."""
    offenders = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        for name in _imported_modules(path):
            last = name.rsplit(".", 1)[-1]
            if name.startswith("tests.") and (last.startswith("test_") or last == "conftest"):
                offenders.append(f"{path.relative_to(REPO)} imports {name}")
    assert offenders == [], "\n".join(offenders)


def test_tests_launch_mpiexec_only_through_the_helper_that_checks_the_marker() -> None:
    """diel's find_mpiexec is wrapped by tests/helpers/launch.py, which fails a test not
    marked ``mpi``: a test taking diel's own would slip into ``pytest -m "not mpi"``."""
    helper = REPO / "tests" / "helpers" / "launch.py"
    offenders = [str(path.relative_to(REPO)) for path in sorted((REPO / "tests").rglob("*.py"))
                 if path != helper
                 and "diel.executive.command.find_mpiexec" in _imported_modules(path)]
    assert offenders == []
