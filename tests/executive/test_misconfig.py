"""Misconfigurations of a search workflow: ``diel validate`` and ``mpiexec -n 4 diel run``
both refuse each one before anything starts, with its own one-line message, printed
once, exit status 2 on every rank, and no file created or changed."""

from __future__ import annotations

import hashlib
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from diel.cli import main
from diel.executive.config import DuplicateKeyError, load_yaml
from diel.results._check import DatabaseProblem, check_database
from tests.helpers.launch import REPO, run_diel, run_diel_in_process, run_mpi
from tests.helpers.unprivileged import unprivileged_argv
from trainer.objective import TRAINER_KEYS

RANKS = 4  # space 1 + search 1 + trainer 2 copies


def workflow(search: str = "", trainer: str = "epochs: 1", workers: str = "trainer",
             worker_module: str = "function: trainer") -> str:
    """A search workflow of 4 ranks; ``search`` and ``trainer`` are extra YAML lines of
    the master's and the worker module's settings."""
    return ("modules:\n  space: {function: tuplespace}\n  search:\n    function: search\n"
            f"    settings:\n      workers: {workers}\n      space: {{width: {{values: [32]}}}}\n"
            f"{textwrap.indent(search, ' ' * 6)}\n"
            f"  trainer:\n    {worker_module}\n    copies: 2\n    settings:\n"
            f"{textwrap.indent(trainer, ' ' * 6)}\nservices: [space]\n")


def text_file(folder: Path) -> None:
    (folder / "notes.txt").write_text("not a database\n")


def foreign_sqlite(folder: Path) -> None:
    with sqlite3.connect(folder / "other.db") as connection:
        connection.execute("CREATE TABLE cats (name TEXT)")
    connection.close()


@dataclass(frozen=True)
class Case:
    """One misconfiguration: the workflow text (``{dir}`` is the workflow's folder), what
    to create beside it first, and the fragments its one-line message must contain."""

    id: str
    text: str
    fragments: tuple[str, ...]
    setup: Callable[[Path], None] | None = field(default=None)


CASES = [
    Case("duplicate-key", workflow(trainer="epochs: 1\nbatch_size: 50\nepochs: 3"),
         ("modules.trainer.settings.epochs: duplicate key 'epochs' at line 15 "
          "(first given at line 13)",)),
    Case("duplicate-module", workflow() + "modules: {}\n",
         ("modules: duplicate key 'modules' at line 15 (first given at line 1)",)),
    Case("workers-unknown", workflow(workers="trainerz"),
         ("modules.search.settings.workers: no module named 'trainerz' in the workflow; "
          "did you mean 'trainer'?",)),
    Case("workers-in-another-group",
         workflow() + "groups:\n  first: {modules: [search]}\n  then: {modules: [trainer], "
                      "after: [first]}\n",
         ("modules.search.settings.workers: the workers 'trainer' run in group 'then' and "
          "this search in group 'first': they must run together",)),
    Case("workers-itself", workflow(workers="search"),
         ("modules.search.settings.workers: 'search' is this search module itself",)),
    Case("trainer-setting-typo", workflow(trainer="epocs: 2"),
         ("modules.trainer.settings.epocs: unknown trainer setting; did you mean 'epochs'?",)),
    Case("searched-trainer-typo", workflow().replace("{width:", "{widht:"),
         ("modules.search.settings.space.widht: the builtin trainer has no such setting, "
          "so every trial would ignore it; did you mean 'width'?",)),
    Case("trainer-worker-key-typo", workflow(trainer="timout: 60"),
         ("modules.trainer.settings.timout: unknown trainer setting; did you mean 'timeout'?",)),
    Case("trainer-optimizer-typo", workflow(trainer="optimizer: adamm"),
         ("modules.trainer.settings.optimizer: unknown optimizer 'adamm'; did you mean 'adam'?",)),
    Case("worker-setting-typo",
         workflow(worker_module="function: worker",
                  trainer="run: tests.search.probe_workers:quick\ntimout: 60"),
         ("modules.trainer.settings.timout: unknown setting (did you mean 'timeout'?)",)),
    Case("worker-placeholder-typo",
         workflow(worker_module="function: worker",
                  trainer="command: [python, train.py, --width, '{widht}']"),
         ("modules.trainer.settings.command[3]: unknown placeholder {widht}; did you mean "
          "{width}?",)),
    Case("worker-run-function-typo",
         workflow(worker_module="function: worker", trainer="run: train.py:objectiv"),
         ("modules.trainer.settings.run: train.py has no top-level function 'objectiv'; did "
          "you mean 'objective'?",),
         lambda folder: (folder / "train.py").write_text("def objective(trial):\n"
                                                          "    return 1.0\n")),
    Case("study-on-the-workers-only", workflow(trainer="epochs: 1\nstudy: other"),
         ("modules.trainer.settings.study: 'other' differs from modules.search.settings.study "
          "(not set, so the workflow's name 'wf')",)),
    Case("database-text-file", workflow(search="database: notes.txt"),
         ("modules.search.settings.database: {dir}/notes.txt exists but is not a SQLite "
          "database",), text_file),
    Case("database-foreign-sqlite", workflow(search="database: other.db"),
         ("modules.search.settings.database: {dir}/other.db is another program's SQLite "
          "database (tables: cats)",), foreign_sqlite),
    Case("database-is-a-folder", workflow(search="database: '{dir}'"),
         ("modules.search.settings.database: {dir} is a folder; expected a SQLite file",)),
    Case("database-under-a-file", workflow(search="database: notes.txt/results.db"),
         ("modules.search.settings.database: {dir}/notes.txt/results.db cannot be created: "
          "{dir}/notes.txt is a file, not a folder",), text_file),
    Case("database-no-permission", workflow(search="database: /proc/diel/results.db"),
         ("modules.search.settings.database: /proc/diel/results.db cannot be created: /proc "
          "is on the kernel's proc file system",)),
    Case("default-database-not-sqlite", workflow(), (
        "modules.search.settings.database: {dir}/wf.db exists but is not a SQLite database",
        "(the default results database beside the workflow)"),
         lambda folder: (folder / "wf.db").write_bytes(b"\x00garbage")),
    Case("database-driver-missing", workflow(search="database: 'postgresql+pg8000://u@db/x'"),
         ("modules.search.settings.database: postgresql+pg8000://u@db/x: the postgresql driver "
          "'pg8000' is not installed", "pip install -e '.[postgres]'")),
    Case("database-url-one-slash", workflow(search="database: 'sqlite:/oops.db'"),
         ("modules.search.settings.database: 'sqlite:/oops.db' is not a database URL",)),
    Case("database-unknown-dialect", workflow(search="database: 'postgres://u@db/x'"),
         ("modules.search.settings.database: postgres://u@db/x: unknown database dialect "
          "'postgres' (did you mean 'postgresql'?)",)),
    Case("database-malformed-url",
         workflow(search="database: 'postgresql+psycopg://u:secret@db:port/x'"),
         ("modules.search.settings.database: 'postgresql+psycopg://u:***@db:port/x' is not a "
          "database URL (its port is not a number)",)),
]


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` with a checksum of its bytes (folders marked)."""
    return {str(p.relative_to(folder)): ("dir" if p.is_dir() else
                                         hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(folder.rglob("*"))}


def prepare(case: Case, tmp_path: Path) -> tuple[Path, list[str]]:
    """Write the case's workflow (and its files); return it and the expected fragments."""
    folder = tmp_path / "wf"
    folder.mkdir()
    if case.setup is not None:
        case.setup(folder)
    path = folder / "wf.yaml"
    path.write_text(case.text.replace("{dir}", str(folder)))
    return path, [fragment.replace("{dir}", str(folder)) for fragment in case.fragments]


def the_one_error(stderr: str) -> str:
    """The single line of ``stderr``, which must be a diel error and nothing else."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("diel: error: "), stderr
    return lines[0]


def test_validate_gives_each_misconfiguration_its_own_message(tmp_path, capsys):
    """Without MPI, every case of the table gets one error line holding its fragments,
    and no two cases get the same line."""
    lines = {}
    for case in CASES:
        folder = tmp_path / case.id
        folder.mkdir()
        path, fragments = prepare(case, folder)
        assert main(["validate", str(path)]) == 2, case.id
        line = the_one_error(capsys.readouterr().err)
        assert [fragment for fragment in fragments if fragment not in line] == [], line
        lines[case.id] = line.replace(str(path.parent), "DIR")
    assert len(set(lines.values())) == len(lines), lines


@pytest.mark.mpi
@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_validate_and_run_refuse_with_one_line_and_exit_2(tmp_path, case):
    path, fragments = prepare(case, tmp_path)
    before = snapshot(tmp_path)
    validate = run_diel("validate", str(path), timeout=60)
    run = run_diel("run", str(path), n=RANKS, timeout=90)
    for result in (validate, run):
        assert result.returncode == 2, result.stderr
        line = the_one_error(result.stderr)
        assert line.startswith(f"diel: error: {path}: ")
        for fragment in fragments:
            assert fragment in line
    assert the_one_error(validate.stderr) == the_one_error(run.stderr)
    assert snapshot(tmp_path) == before  # validation created and changed nothing


# Runs the CLI on a rank and records the status it exits with in a file of its own.
RANK_EXIT = ("import os, sys; from diel.cli import main; status = main(sys.argv[2:]); "
             "open(os.path.join(sys.argv[1], f'exit.{os.getpid()}'), 'w').write(str(status)); "
             "sys.exit(status)")


@pytest.mark.mpi
@pytest.mark.parametrize("case_id", ["duplicate-key", "trainer-setting-typo",
                                     "database-under-a-file"])
def test_every_rank_exits_2(tmp_path, case_id):
    case = next(case for case in CASES if case.id == case_id)
    path, _ = prepare(case, tmp_path)
    statuses = tmp_path / "statuses"
    statuses.mkdir()
    result = run_mpi(RANKS, [sys.executable, "-c", RANK_EXIT, str(statuses), "run", str(path)],
                     timeout=90)
    assert result.returncode == 2, result.stderr
    assert [p.read_text() for p in statuses.iterdir()] == ["2"] * RANKS
    assert result.stderr.count("diel: error:") == 1, result.stderr


def test_a_valid_search_passes_and_creates_no_database(tmp_path):
    folder = tmp_path / "wf"
    folder.mkdir()
    path = folder / "wf.yaml"
    path.write_text(workflow(search="database: results/new.db",
                             trainer="epochs: 2\nlayers: 2\nlearning_rate: 0.1\n"
                                     "schedule: date\nbase_batch_size: 100"))
    result = run_diel_in_process("validate", str(path))
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["wf.yaml"]


def test_an_executable_trainer_keeps_its_own_placeholder_settings(tmp_path):
    path = tmp_path / "wf.yaml"
    path.write_text(workflow(trainer="command: [python, train.py, '{width}', '{log}']\n"
                                     "log: out.txt\noptimizer: mine"))
    result = run_diel_in_process("validate", str(path))
    assert result.returncode == 0, result.stderr


# --- duplicate keys, in process ------------------------------------------------------

def test_duplicate_keys_name_the_key_path_and_both_lines():
    with pytest.raises(DuplicateKeyError) as error:
        load_yaml("a:\n  b: [{c: 1, d: 2, c: 3}]\n")
    assert (error.value.path, error.value.line, error.value.first_line) == ("a.b[0].c", 2, 2)


def test_merge_keys_may_be_overridden():
    data = load_yaml("base: &b {epochs: 1, seed: 2}\nrun:\n  <<: *b\n  epochs: 5\n")
    assert data["run"] == {"epochs": 5, "seed": 2}


# --- the database check, in process --------------------------------------------------

def test_accepted_databases_are_left_untouched(tmp_path):
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    diel_db = tmp_path / "diel.db"
    with sqlite3.connect(diel_db) as connection:
        connection.executescript("CREATE TABLE studies (id INTEGER); "
                                 "CREATE TABLE trials (id INTEGER);")
    connection.close()
    before = snapshot(tmp_path)
    for url in (f"sqlite:///{empty}", f"sqlite:///{diel_db}", f"sqlite:///{tmp_path}/a/b/new.db",
                "sqlite://", "postgresql+psycopg://user@localhost/diel"):
        check_database(url)
    assert snapshot(tmp_path) == before


def test_missing_psycopg_names_the_postgres_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg now fails
    with pytest.raises(DatabaseProblem, match=r"driver 'psycopg' is not installed .*"
                                              r"install it with pip install -e '\.\[postgres\]'"):
        check_database("postgresql+psycopg://user@localhost/diel")


def test_a_folder_without_write_permission():
    """diel validate, run as a user who may not write the database's folder (``nobody``
    when the tests run as root, since root may write anywhere), refuses it. The folders
    are outside pytest's temporary folder, which only its owner may enter."""
    base = Path(tempfile.mkdtemp(prefix="diel-perm-"))
    try:
        base.chmod(0o755)
        locked = base / "locked"
        locked.mkdir(mode=0o555)
        path = base / "wf.yaml"
        path.write_text(workflow(search=f"database: {locked}/results.db"))
        done = subprocess.run([*unprivileged_argv(), sys.executable, "-m", "diel", "validate",
                               str(path)], capture_output=True, text=True, timeout=60, cwd=REPO)
        assert done.returncode == 2, done.stderr
        assert the_one_error(done.stderr).endswith(
            f"modules.search.settings.database: {locked}/results.db cannot be written: no "
            f"permission to create files in {locked}"), done.stderr
        assert sorted(p.name for p in base.iterdir()) == ["locked", "wf.yaml"]
        assert list(locked.iterdir()) == []
    finally:
        shutil.rmtree(base)


def test_docs_list_every_trainer_setting():
    text = (REPO / "docs" / "trainer.md").read_text()
    section = text[text.index("## Settings of the builtin `trainer` module"):]
    assert [key for key in TRAINER_KEYS if f"`{key}`" not in section] == []


def test_every_key_build_model_reads_is_a_known_trainer_setting():
    source = (REPO / "trainer" / "build.py").read_text()
    read = set(re.findall(r"params\.get\(\"(\w+)\"", source))
    assert read and read <= set(TRAINER_KEYS)
