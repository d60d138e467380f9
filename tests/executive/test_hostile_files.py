"""Huge, hostile or strange workflow files and paths: each is refused quickly with one
line naming what is wrong, exit status 2 and no traceback, by ``diel validate`` (its
entry point in process, and for a few cases the command in a subprocess) and by the
loader in process."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from diel.cli import load_checked, main
from diel.executive.config import MAX_WORKFLOW_BYTES
from diel.errors import ConfigError
from diel.executive.yaml12 import MAX_YAML_DEPTH, MAX_YAML_NODES
from tests.helpers.launch import run_diel
from tests.helpers.unprivileged import unprivileged_argv

FAST_S = 5.0   # loosely: the point is seconds, not the minutes these took before


def search(worker: str = "run: train.py:objective", database: str = "") -> str:
    """A valid search workflow but for ``worker`` (the worker's settings line) and
    ``database`` (a line of the search's settings)."""
    return ("modules:\n  space: {function: tuplespace}\n  search:\n    function: search\n"
            "    settings:\n      workers: trainer\n      space: {lr: {values: [1e-3, 1e-2]}}\n"
            f"      {database}\n  trainer:\n    function: worker\n    settings:\n"
            f"      {worker}\nservices: [space]\n")


def laughs(levels: int = 9) -> str:
    """The "billion laughs": each anchor a list of nine aliases of the one before."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
    last = f"*l{levels - 1}"
    return "\n".join(lines) + f"\nmodules: {{a: {{function: x:y, settings: {{v: {last}}}}}}}\n"


LONG_NAME = "a" * 300                      # one path component past NAME_MAX (255)
LONG_PATH = "/tmp/" + "d/" * 2500 + "f"    # 5,000 characters: past PATH_MAX (4,096)


@dataclass(frozen=True)
class Case:
    """``make(folder)`` writes what the case needs and returns the workflow path to
    check; ``fragment`` must be in the one error line."""

    id: str
    make: Callable[[Path], str]
    fragment: str
    subprocess: bool = True   # False: a path no command line can carry (a NUL)


def write(text: str, name: str = "wf.yaml") -> Callable[[Path], str]:
    def make(folder: Path) -> str:
        (folder / name).write_text(text)
        return str(folder / name)
    return make


def write_bytes(data: bytes) -> Callable[[Path], str]:
    def make(folder: Path) -> str:
        (folder / "wf.yaml").write_bytes(data)
        return str(folder / "wf.yaml")
    return make


def huge(size: int) -> Callable[[Path], str]:
    """A file of ``size`` bytes, one string scalar (sparse: its tail reads as NULs)."""
    def make(folder: Path) -> str:
        path = folder / "wf.yaml"
        with open(path, "wb") as stream:
            stream.write(b'modules: "')
            stream.truncate(size)
        return str(path)
    return make


def beside(files: dict[str, str | None], text: str) -> Callable[[Path], str]:
    """Files (None: a folder) beside the workflow ``text``."""
    def make(folder: Path) -> str:
        for name, content in files.items():
            if content is None:
                (folder / name).mkdir()
            else:
                (folder / name).write_text(content)
        return write(text)(folder)
    return make


OBJECTIVE = {"train.py": "def objective(trial):\n    return 1.0\n"}

CASES = [
    # the workflow file itself
    Case("over-the-size-limit", huge(MAX_WORKFLOW_BYTES + 1),
         f"the file is larger than {MAX_WORKFLOW_BYTES >> 20} MiB"),
    Case("a-100-MB-string", huge(100 << 20), "the file is larger than"),
    Case("a-device-without-end", lambda folder: "/dev/zero", "the file is larger than"),
    Case("billion-laughs", write(laughs()),
         f"more than {MAX_YAML_NODES:,} values (anchors repeated inside anchors?)"),
    Case("alias-of-itself", write("modules: &m {a: *m}\n"),
         "the node at line 1 contains an alias of itself"),
    Case("nested-too-deep", write("modules: " + "[" * 300 + "]" * 300 + "\n"),
         "nested"),
    Case("nested-just-too-deep", write("modules: " + "[" * MAX_YAML_DEPTH + "1"
                                       + "]" * MAX_YAML_DEPTH + "\n"),
         f"nested more than {MAX_YAML_DEPTH} levels deep"),
    Case("nul-in-text", write("modules: {a: \x00}\n"),
         "not valid YAML at line 1: the character U+0000 is not allowed"),
    Case("not-utf8", write_bytes(b"modules: {}\nname: caf\xe9\n"),
         "not UTF-8 text: byte 0xe9 at line 2"),
    Case("a-folder", lambda folder: str(folder), "cannot read the workflow file: Is a directory"),
    Case("file-name-too-long", lambda folder: str(folder / LONG_NAME),
         "cannot read the workflow file: File name too long"),
    Case("path-too-long", lambda folder: LONG_PATH,
         "cannot read the workflow file: File name too long"),
    Case("nul-in-path", lambda folder: str(folder / "wf\x00.yaml"),
         "cannot read the workflow file: embedded null byte", subprocess=False),
    # names and paths inside it: function:, run:, command:, database:
    Case("function-nul", write('modules:\n  a: {function: "x\\0y:main"}\n'),
         "modules.a.function: cannot import 'x\\x00y'"),
    Case("function-name-too-long", write(f"modules:\n  a: {{function: '{LONG_NAME}:main'}}\n"),
         "modules.a.function: cannot import 'aaa"),
    Case("run-file-name-too-long", beside(OBJECTIVE, search(f"run: {LONG_NAME}.py:objective")),
         "modules.trainer.settings.run: ", ),
    Case("run-path-too-long", beside(OBJECTIVE, search(f"run: {LONG_PATH}.py:objective")),
         "cannot be used: File name too long"),
    Case("run-nul", beside(OBJECTIVE, search('run: "train\\0.py:objective"')),
         "modules.trainer.settings.run: "),
    Case("run-a-folder", beside({"train.py": None}, search()),
         "train.py: is a folder, not a Python file"),
    Case("run-syntax-error", beside({"train.py": "def objective(trial):\n    return (\n"},
                                    search()),
         "modules.trainer.settings.run: train.py, line 2: '(' was never closed"),
    Case("run-module-name-too-deep", beside({}, search("run: " + "a." * 2500 + "b:objective")),
         "modules.trainer.settings.run: cannot find module"),
    Case("command-a-folder", beside({"bin": None}, search("command: [./bin, '{lr}']")),
         "modules.trainer.settings.command[0]: './bin' is a folder, not a program"),
    Case("command-not-executable", beside({"run.sh": "#!/bin/sh\n"},
                                          search("command: [./run.sh, '{lr}']")),
         "'./run.sh' is not executable"),
    Case("command-name-too-long", beside({}, search(f"command: ['./{LONG_NAME}', '{{lr}}']")),
         "modules.trainer.settings.command[0]: program "),
    Case("command-path-too-long", beside({}, search(f"command: ['{LONG_PATH}', '{{lr}}']")),
         "modules.trainer.settings.command[0]: program "),
    Case("command-nul", beside({}, search('command: ["./run\\0", "{lr}"]')),
         "modules.trainer.settings.command[0]: program './run\\x00' not found"),
    Case("database-name-too-long", beside(OBJECTIVE, search(database=f"database: {LONG_NAME}.db")),
         "modules.search.settings.database: "),
    Case("database-path-too-long", beside(OBJECTIVE, search(database=f"database: {LONG_PATH}.db")),
         "cannot be used: File name too long"),
    Case("database-nul", beside(OBJECTIVE, search(database='database: "r\\0.db"')),
         "modules.search.settings.database: results database r\\x00.db: not a usable path "
         "(embedded null byte)"),
    Case("database-no-such-user", beside(OBJECTIVE, search(database="database: ~nosuchuser/r.db")),
         "modules.search.settings.database: results database ~nosuchuser/r.db: not a usable path"),
]
def unreadable(name: str, text: str) -> Callable[[Path], str]:
    """Write ``name`` with ``text`` and take away every permission on it."""
    def make(folder: Path) -> str:
        path = write(text, name)(folder)
        Path(path).chmod(0)
        return path
    return make


# Files only root may read: checked by a user the permissions apply to (nobody as root).
UNREADABLE = [
    Case("workflow-unreadable", unreadable("wf.yaml", "modules: {}\n"),
         "cannot read the workflow file: Permission denied"),
    Case("run-unreadable", lambda folder: (unreadable("train.py", "x = 1\n")(folder),
                                           write(search())(folder))[1],
         "modules.trainer.settings.run: cannot read "),
]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_refused_in_process_quickly_with_one_line(tmp_path, case):
    path = case.make(tmp_path)
    started = time.monotonic()
    with pytest.raises(ConfigError) as error:
        load_checked(path)
    assert time.monotonic() - started < FAST_S
    message = str(error.value)
    assert "\n" not in message and case.fragment in message
    assert len(message) < 1000


def assert_one_error_line(code: int, stderr: str, case: Case) -> None:
    """``diel validate``'s answer to ``case``: exit status 2, one line naming the mistake."""
    assert code == 2, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("diel: error: "), stderr
    assert case.fragment in lines[0] and "Traceback" not in stderr


@pytest.mark.parametrize("case", [c for c in CASES if c.subprocess],
                         ids=[c.id for c in CASES if c.subprocess])
def test_diel_validate_answers_exit_2_with_one_line(tmp_path, monkeypatch, capsys, case):
    """The command's entry point in process (the console script runs it: see below)."""
    path = case.make(tmp_path)
    monkeypatch.chdir(tmp_path)
    started = time.monotonic()
    code = main(["validate", path])
    elapsed = time.monotonic() - started
    assert_one_error_line(code, capsys.readouterr().err, case)
    assert elapsed < FAST_S


# The command itself, as a user starts it: a few cases of each kind (the file, its run:
# and its database:), the 100 MB file and the path past PATH_MAX among them.
COMMAND_CASES = ["a-100-MB-string", "path-too-long", "run-syntax-error", "database-nul"]


@pytest.mark.parametrize("case", [c for c in CASES if c.id in COMMAND_CASES],
                         ids=COMMAND_CASES)
def test_the_diel_command_answers_exit_2_with_one_line(tmp_path, case):
    path = case.make(tmp_path)
    started = time.monotonic()
    result = run_diel("validate", path, timeout=60, cwd=tmp_path)
    elapsed = time.monotonic() - started
    assert_one_error_line(result.returncode, result.stderr, case)
    assert elapsed < FAST_S + 5   # the interpreter's start on a loaded machine on top


@pytest.mark.parametrize("case", UNREADABLE, ids=[case.id for case in UNREADABLE])
def test_unreadable_files_are_refused_with_one_line(case):
    """diel validate run as a user who may not read the file (``nobody`` when the tests
    run as root, who reads anything), in a folder outside pytest's, which only its owner
    may enter; that user may write the folder, where the results database would go."""
    folder = Path(tempfile.mkdtemp(prefix="diel-unreadable-"))
    try:
        folder.chmod(0o777)
        path = case.make(folder)
        result = subprocess.run([*unprivileged_argv(), sys.executable, "-m", "diel", "validate",
                                 path], capture_output=True, text=True, timeout=60, cwd=folder)
        assert result.returncode == 2, result.stderr
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("diel: error: "), result.stderr
        assert case.fragment in lines[0] and "Traceback" not in result.stderr
    finally:
        shutil.rmtree(folder)


def test_memory_stays_bounded_for_the_billion_laughs(tmp_path):
    """The refusal comes before anything expands: a few MB at most, not gigabytes."""
    path = write(laughs(levels=12))(tmp_path)
    # VmHWM, this process's peak resident memory: ru_maxrss would also count the memory
    # of the (large) pytest process this one was forked from before its exec.
    code = ("import sys; from diel.executive.config import load_workflow\n"
            "try:\n    load_workflow(sys.argv[1])\nexcept ValueError as e:\n    print(e)\n"
            "print(next(line.split()[1] for line in open('/proc/self/status')\n"
            "           if line.startswith('VmHWM:')))")
    out = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True,
                         timeout=60).stdout.splitlines()
    assert "contains an alias of itself" not in out[0] and "values" in out[0]
    assert int(out[1]) < 200_000   # KiB: the interpreter and diel's imports
