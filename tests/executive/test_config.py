"""Workflow validation: malformed configs give their own clear message and exit 2."""

from __future__ import annotations

import textwrap

import pytest

from diel.cli import main
from tests.helpers.launch import run_diel

GOOD_MODULE = "tests.executive.probes:nothing"

# (case id, YAML text, fragments the one error message must contain)
MALFORMED = [
    ("yaml-syntax", "modules: [unclosed\n", ["not valid YAML", "line"]),
    ("top-not-mapping", "- a\n- b\n", ["expected the workflow file to be a mapping"]),
    ("unknown-top-key", "modlues: {}\n", ["modlues: unknown key", "did you mean 'modules'"]),
    ("no-modules", "groups: {}\n", ["modules: missing"]),
    ("unknown-module-key",
     f"modules:\n  a: {{function: '{GOOD_MODULE}', sizes: 2}}\n",
     ["modules.a.sizes: unknown key", "did you mean 'size'"]),
    ("size-not-int", f"modules:\n  a: {{function: '{GOOD_MODULE}', size: two}}\n",
     ["modules.a.size: expected a whole number >= 1, got 'two'"]),
    ("copies-zero", f"modules:\n  a: {{function: '{GOOD_MODULE}', copies: 0}}\n",
     ["modules.a.copies: expected a whole number >= 1, got 0"]),
    ("function-and-command",
     f"modules:\n  a: {{function: '{GOOD_MODULE}', command: [python]}}\n",
     ["modules.a: expected exactly one of 'function'", "both are given"]),
    ("neither-function-nor-command", "modules:\n  a: {size: 1}\n",
     ["neither is given", "modules.a: expected exactly one of 'function'"]),
    ("command-as-string", "modules:\n  a: {command: 'python sim.py'}\n",
     ["modules.a.command: expected a list", "never run through a shell"]),
    ("unimportable-function", "modules:\n  a: {function: 'no_such_pkg.mod:main'}\n",
     ["modules.a.function: cannot import 'no_such_pkg.mod'", "No module named 'no_such_pkg'"]),
    ("missing-attribute", "modules:\n  a: {function: 'tests.executive.probes:absent'}\n",
     ["modules.a.function: module 'tests.executive.probes' has no attribute 'absent'"]),
    ("unknown-builtin", "modules:\n  a: {function: trainr}\n",
     ["modules.a.function: 'trainr' is not a builtin module"]),
    ("group-names-missing-module",
     f"modules:\n  a: {{function: '{GOOD_MODULE}'}}\ngroups:\n  g: {{modules: [a, b]}}\n",
     ["groups.g.modules[1]: no module named 'b'"]),
    ("group-cycle",
     f"modules:\n  a: {{function: '{GOOD_MODULE}'}}\n  b: {{function: '{GOOD_MODULE}'}}\n"
     f"  c: {{function: '{GOOD_MODULE}'}}\n"
     "groups:\n  x: {modules: [a], after: [z]}\n  y: {modules: [b], after: [x]}\n"
     "  z: {modules: [c], after: [y]}\n",
     ["the groups form a cycle: x -> z -> y -> x", "DAG"]),
    ("after-unknown-group",
     f"modules:\n  a: {{function: '{GOOD_MODULE}'}}\ngroups:\n  g: {{modules: [a], after: [pre]}}\n",
     ["groups.g.after[0]: no group named 'pre'"]),
    ("module-in-no-group",
     f"modules:\n  a: {{function: '{GOOD_MODULE}'}}\n  b: {{function: '{GOOD_MODULE}'}}\n"
     "groups:\n  g: {modules: [a]}\n",
     ["modules.b: is in no group and is not a service"]),
    ("module-in-two-groups",
     f"modules:\n  a: {{function: '{GOOD_MODULE}'}}\n"
     "groups:\n  g: {modules: [a]}\n  h: {modules: [a]}\n",
     ["groups.h.modules[0]: 'a' is already in group 'g'"]),
    ("iterations-negative",
     f"modules:\n  a: {{function: '{GOOD_MODULE}'}}\ngroups:\n  g: {{modules: [a], iterations: -1}}\n",
     ["groups.g.iterations: expected a whole number >= 1, got -1"]),
    ("service-in-group",
     f"modules:\n  a: {{function: '{GOOD_MODULE}'}}\nservices: [a]\ngroups:\n  g: {{modules: [a]}}\n",
     ["groups.g.modules[0]: 'a' is a service"]),
    ("unknown-placeholder",
     "modules:\n  a: {command: [python, sim.py, '{lr}'], settings: {steps: 3}}\n",
     ["modules.a.command[2]: unknown placeholder {lr}"]),
    ("program-not-found", "modules:\n  a: {command: [no-such-program-xyz]}\n",
     ["modules.a.command[0]: program 'no-such-program-xyz' not found"]),
    ("timeout-on-function", f"modules:\n  a: {{function: '{GOOD_MODULE}', timeout: 5}}\n",
     ["modules.a.timeout: only executable ('command') modules take a timeout"]),
]


def write(tmp_path, text: str):
    path = tmp_path / "bad.yaml"
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.mpi
@pytest.mark.parametrize("case, text, fragments", MALFORMED, ids=[case[0] for case in MALFORMED])
def test_malformed_config_is_reported_once_and_every_rank_exits_2(tmp_path, case, text, fragments):
    path = write(tmp_path, text)
    result = run_diel("run", str(path), n=2, timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("diel: error:") == 1, result.stderr
    assert str(path) in result.stderr
    for fragment in fragments:
        assert fragment in result.stderr
    assert "Traceback" not in result.stderr


def test_validate_gives_each_mistake_its_own_message(tmp_path, capsys):
    """Without MPI, every malformed config of the table gets one error line holding its
    fragments, and no two mistakes get the same line."""
    lines = {}
    for case, text, fragments in MALFORMED:
        folder = tmp_path / case
        folder.mkdir()
        path = write(folder, text)
        assert main(["validate", str(path)]) == 2, case
        errors = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(errors) == 1 and errors[0].startswith(f"diel: error: {path}: "), (case, errors)
        assert [fragment for fragment in fragments if fragment not in errors[0]] == [], errors[0]
        lines[case] = errors[0].replace(str(path), "FILE")
    assert len(set(lines.values())) == len(lines), lines


def test_validate_reports_the_same_mistake_without_mpi(tmp_path, capsys):
    path = write(tmp_path, f"modules:\n  a: {{function: '{GOOD_MODULE}', size: 0}}\n")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: modules.a.size: expected a whole number >= 1, got 0" in err


def test_missing_workflow_file(tmp_path, capsys):
    missing = tmp_path / "nope.yaml"
    assert main(["validate", str(missing)]) == 2
    assert f"{missing}: no such workflow file" in capsys.readouterr().err


@pytest.mark.mpi
def test_wrong_rank_count_names_the_mpiexec_that_fits(tmp_path):
    path = write(tmp_path, f"modules:\n  a: {{function: '{GOOD_MODULE}'}}\n"
                           f"  b: {{function: '{GOOD_MODULE}', size: 2, copies: 2}}\n")
    result = run_diel("run", str(path), n=2, timeout=60)
    assert result.returncode == 2
    assert result.stderr.count("diel: error:") == 1
    assert "needs 5 ranks (a 1, b 2x2) but 2 were started" in result.stderr
    assert f"mpiexec -n 5 diel run {path}" in result.stderr


def test_validate_prints_layout_and_mpiexec_line(tmp_path, capsys):
    path = write(tmp_path, f"""\
        modules:
          first: {{function: '{GOOD_MODULE}'}}
          workers: {{function: '{GOOD_MODULE}', size: 2, copies: 2}}
          last: {{function: '{GOOD_MODULE}'}}
        groups:
          a: {{modules: [first]}}
          b: {{modules: [workers, last], after: [a], iterations: 3}}
        """)
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines()]
    assert ["workers", "0", "2", "1-2"] in rows
    assert ["workers", "1", "2", "3-4"] in rows
    assert ["last", "0", "1", "5"] in rows
    assert "b: workers, last (3 iterations, after a)" in out
    assert f"mpiexec -n 6 diel run {path}" in out


def test_help_explains_commands(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "run" in out and "validate" in out and "mpiexec" in out


def test_unknown_subcommand_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["frobnicate"])
    assert exit_info.value.code == 2
