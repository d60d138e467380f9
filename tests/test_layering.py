"""The dependency rules of docs/architecture.md that a reading of the sources can check
(with ``ast``, importing nothing): ``diel.results`` is the only door to the database,
so no module outside it (in diel, benchmarks or examples) imports its underscore
modules, its underscore names or its ORM models; ``tuplespace`` imports neither ``diel``
nor ``trainer``; ``trainer`` never imports ``diel``; and nothing imports ``diel.cli``
but the console script (``python -m diel`` is one)."""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.launch import REPO

# One worker runs this module, so that each source is parsed once (imports).
pytestmark = pytest.mark.xdist_group("layering")

MODELS = ("Base", "StudyModel", "TrialModel", "TrialMetricModel", "LeaseModel", "MetaModel")


@dataclass(frozen=True)
class Import:
    """One import of a source file: the module and, for ``from M import N``, the name."""

    line: int
    module: str
    name: str | None = None

    def __str__(self) -> str:
        return f"line {self.line}: " + (f"from {self.module} import {self.name}" if self.name
                                        else f"import {self.module}")


def sources(*folders: str, root: Path = REPO) -> list[Path]:
    """The Python files under ``folders`` of the repository at ``root``."""
    return sorted(path for folder in folders for path in (root / folder).rglob("*.py"))


@functools.lru_cache(maxsize=None)
def imports(path: Path, root: Path = REPO) -> tuple[Import, ...]:
    """What ``path`` imports (relative imports made absolute), and the dotted attribute
    chains it names (``diel.results._query.Results`` after ``import diel.results``)."""
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [Import(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(part for part in (base, node.module) if part)
            found += [Import(node.lineno, module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Attribute) and _dotted(node):
            found.append(Import(node.lineno, _dotted(node)))
    return tuple(found)


def _dotted(node: ast.expr) -> str:
    """``a.b.c`` for an attribute chain on a name, else ''."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else ""


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def private_results(found: Import) -> bool:
    """An import of diel.results' underscore modules or names, or of its ORM models."""
    if not within(found.module, "diel.results"):
        return False
    names = [*found.module.split(".")[2:], *([found.name] if found.name else [])]
    return any(part.startswith("_") or part in MODELS for part in names)


def imports_cli(found: Import) -> bool:
    return within(found.module, "diel.cli") or (found.module == "diel" and found.name == "cli")


def offenders(files: list[Path], rule, root: Path = REPO) -> list[str]:
    """Each import of ``files`` that ``rule`` catches, with its file and line."""
    return [f"{path.relative_to(root)} {found}" for path in files
            for found in imports(path, root) if rule(found)]


def test_only_diel_results_touches_its_private_modules_and_models() -> None:
    files = [path for path in sources("diel", "benchmarks", "examples")
             if not path.is_relative_to(REPO / "diel" / "results")]
    assert offenders(files, private_results) == []


RESULTS_MAY_USE = ("diel.executive.paths", "diel.executive.yaml12")   # path and number helpers
PARTS = ("diel.executive", "diel.search", "diel.worker", "diel.plot", "diel.dashboard",
         "diel.cli", "diel.testing")
SHARED = ("diel.errors", "diel.limits", "diel.checks", "diel.plugins", "diel.lazy",
          "diel.procfs")


def other_part_for_results(found: Import) -> bool:
    """An import, by diel.results, of another part (but the executive's small helpers)."""
    return any(within(found.module, part) for part in PARTS) and \
        not any(within(found.module, allowed) for allowed in RESULTS_MAY_USE)


def part_for_shared(found: Import) -> bool:
    """An import, by a shared module (errors, limits, checks, plugins, lazy, procfs), of diel beyond
    them."""
    return within(found.module, "diel") and found.module != "diel" and \
        not any(within(found.module, shared) for shared in SHARED)


def test_results_imports_no_other_part() -> None:
    """diel.results is below search, worker, plot and dashboard, which read and write
    through it; of the executive it uses only its path and number helpers."""
    assert offenders(sources("diel/results"), other_part_for_results) == []


def test_the_shared_modules_import_no_part() -> None:
    files = [REPO / "diel" / f"{name.split('.')[1]}.py" for name in SHARED]
    assert offenders(files, part_for_shared) == []


def test_tuplespace_imports_neither_diel_nor_trainer() -> None:
    assert offenders(sources("tuplespace"), lambda found: within(found.module, "diel") or
                     within(found.module, "trainer")) == []


def test_trainer_never_imports_diel() -> None:
    assert offenders(sources("trainer"), lambda found: within(found.module, "diel")) == []


def test_nothing_imports_the_cli_but_the_console_script() -> None:
    files = [path for path in sources("diel", "tuplespace", "trainer", "benchmarks", "examples")
             if path != REPO / "diel" / "__main__.py"]
    assert offenders(files, imports_cli) == []


@pytest.mark.parametrize("source, rule, caught", [
    ("from diel.results._query import Results\n", private_results, True),
    ("from diel.results import _query\n", private_results, True),
    ("from diel.results.cli import _usage\n", private_results, True),
    ("import diel.results\nx = diel.results._models.utcnow\n", private_results, True),
    ("from diel.results import StudyModel\n", private_results, True),
    ("from diel.results import Results, get_storage\nimport diel.results.cli\n",
     private_results, False),
    ("from diel.cli import main\n", imports_cli, True),
    ("from diel import cli\n", imports_cli, True),
    ("from .. import cli\n", imports_cli, True),
    ("from diel import errors\n", imports_cli, False),
    ("from diel.search.engine import SearchEngine\n", other_part_for_results, True),
    ("from diel.executive.config import Workflow\n", other_part_for_results, True),
    ("from diel.executive.paths import shown_path\n", other_part_for_results, False),
    ("from diel.worker.trial import Trial\n", part_for_shared, True),
    ("from diel.errors import ConfigError\n", part_for_shared, False),
])
def test_the_rules_catch_what_they_are_for(tmp_path, source, rule, caught):
    """Each rule fails a file that breaks it, whatever form the import takes."""
    (tmp_path / "diel" / "plot").mkdir(parents=True)
    (tmp_path / "diel" / "plot" / "bad.py").write_text(source)
    assert bool(offenders(sources("diel", root=tmp_path), rule, tmp_path)) is caught
