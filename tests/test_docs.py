"""Every command and snippet in README.md and docs/*.md runs. The blocks are read from the
Markdown when the tests run, so a doc cannot drift from what diel does.

Every fenced block carries a language, which says what is done with it:

- ``bash``: commands, one a line (``\\`` continues a line, ``#`` starts a comment, ``&&``
  separates commands, ``> FILE`` sends a command's output to FILE). Each runs without a
  shell (shlex, argv lists) in the doc's folder (below) and must exit 0; ``diel``,
  ``python`` and ``mpiexec`` are this environment's, ``~`` is a scratch home, a leading
  ``NAME=value`` goes into the environment. What cannot run here follows the rules of
  :func:`run_command`: :data:`NOT_RUN` (installing, a cluster, the test suite itself, a
  PostgreSQL server), a benchmark (minutes: only its arguments are checked, by argparse
  with ``--help`` after them, which rejects a malformed value but not an unknown
  option), ``diel dashboard`` (it serves until stopped: on a free port unless the doc
  gives ``--socket``, until it prints its address, then Ctrl-C), a search the session
  already ran (its exit status is checked).
- ``python``: a block whose first line names a file (``# train.py``, ``# mypkg/hello.py``)
  is written there, in the doc's folder, before the doc's blocks run, for its workflows,
  commands and snippets to use. Then a ``tests/test_*.py`` file runs under pytest (a
  conformance suite); a file that a ``bash`` block of the doc runs is left to it; a
  function ``objective(trial)`` (a trial function) is called with a
  ``diel.worker.Trial``, the names it leaves to its user given by :data:`OPEN_NAMES`;
  any other block runs as a script in the doc's folder.
- ``yaml``: a whole workflow (a top-level ``modules:``) must pass ``diel validate`` in
  the doc's folder; any other block is a fragment of one: diel's YAML reader must read
  it as a mapping.
- ``toml``: read with tomllib; its ``[project.entry-points."GROUP"]`` tables are
  installed for the doc's folder (a ``.dist-info`` there), as ``pip install`` of the
  doc's package would.
- ``text``: what a command prints, a terminal transcript, a picture. Not run.

The doc's folder: the searches the README runs, and the other shipped configs the docs
query, run once a session by their own commands (:data:`SESSION_RUNS`) in a copy of
configs/ and examples/, so their databases are in ``results/`` as the README says
(never the working tree's); each Markdown file's folder links to them. The database a
cluster job would write (examples/slurm/search.db) is a copy of one of them
(:data:`STAND_INS`).
"""

from __future__ import annotations

import json
import os
import re
import selectors
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

try:
    import tomllib
except ModuleNotFoundError:   # Python 3.10: the same parser from PyPI (the test extra)
    import tomli as tomllib

from diel.executive.config import load_yaml
from diel.worker import Trial
from tests.helpers.launch import REPO, find_mpiexec

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LANGUAGES = ("bash", "python", "yaml", "toml", "text")
TIMEOUT_S = 180

# The session's searches: the README's main job and the configs the docs query.
SESSION_RUNS = [("mpiexec", "-n", "4", "diel", "run", f"configs/{name}.yaml")
                for name in ("mnist_grid", "mnist_random", "mnist_tradeoff")]

# Databases a doc's commands read that only a cluster job writes: the copy standing in.
STAND_INS = {"examples/slurm/search.db": "results/mnist_random.db"}

# Commands not run, by their first words, and why.
SETUP = "sets up the environment the tests already run in"
NOT_RUN = {
    ("pip",): SETUP,
    ("python3", "-m", "venv"): SETUP,
    (".",): SETUP,
    ("source",): SETUP,
    ("module",): "loads a cluster's environment module: no cluster here",
    ("sbatch",): "submits a Slurm job: no cluster here (tests/test_slurm_example.py "
                 "checks the script)",
    ("squeue",): "asks Slurm: no cluster here",
    ("python", "-m", "pytest"): "the test suite itself",
}
POSTGRES_SERVER = ("names a PostgreSQL server: diel's PostgreSQL paths are tested against "
                   "a throwaway one (tests/helpers/postgres.py)")

class StandInModel(dict):
    """A model stood in for: its settings, whose state is a copy of them."""

    def state_dict(self) -> dict:
        return dict(self)

    def load_state_dict(self, state: dict) -> None:
        self.update(state)


# What a trial function in the docs leaves to its user, stood in for: a model is its
# settings, and an epoch of training gives accuracy 0.9 and loss 0.3.
OPEN_NAMES = {
    "make_model": lambda **settings: StandInModel(settings),
    "build": lambda **settings: StandInModel(settings),
    "train_one_epoch": lambda *args, **kwargs: (0.9, 0.3),
}
TRIAL_PARAMS = {"width": 64, "lr": 0.01, "epochs": 3}


@dataclass(frozen=True)
class Block:
    """One fenced block: its file, the line of its opening fence, language and text."""

    doc: Path
    line: int
    language: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(REPO)}:{self.line}"

    @property
    def file(self) -> str | None:
        """The file a python block is (its first line ``# path.py``), else None."""
        first = self.text.split("\n", 1)[0]
        found = re.fullmatch(r"# ([\w./-]+\.py)", first.strip())
        return found.group(1) if self.language == "python" and found else None


def read_blocks(doc: Path) -> list[Block]:
    """The fenced blocks of ``doc``, in order."""
    blocks, lines, index = [], doc.read_text().splitlines(), 0
    while index < len(lines):
        opening = re.match(r"^(\s*)```(.*)$", lines[index])
        if opening is None:
            index += 1
            continue
        indent, end = len(opening.group(1)), index + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        body = "\n".join(line[indent:] for line in lines[index + 1:end])
        blocks.append(Block(doc, index + 1, opening.group(2).strip(), body + "\n"))
        index = end + 1
    return blocks


ALL_BLOCKS = [block for doc in DOCS for block in read_blocks(doc)]


def blocks_of(*languages: str) -> list[Any]:
    """The blocks of ``languages`` as parameters; those that run commands or read the
    session's databases are marked ``mpi`` and ``slow``; the yaml blocks share one
    pytest-xdist worker, whose one ``diel validate`` process checks them all
    (:func:`validated`)."""
    chosen = [b for b in ALL_BLOCKS if b.language in languages]
    marks = [pytest.mark.mpi, pytest.mark.slow] if {"bash", "python"} & set(languages) else []
    if "yaml" in languages:
        marks.append(pytest.mark.xdist_group("docs-yaml"))
    return [pytest.param(b, id=b.where, marks=marks) for b in chosen]


# -- the session's databases and each doc's folder ------------------------------------------

@dataclass
class World:
    """The folder with configs/, examples/ and results/ the session's searches made."""

    root: Path
    runs: dict[tuple[str, ...], subprocess.CompletedProcess]


def environment(folder: Path) -> dict[str, str]:
    """The commands' environment: a scratch home, one BLAS thread a rank."""
    return {**os.environ, "HOME": str(folder / "home"), "OMP_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1"}


def program(words: list[str]) -> list[str]:
    """``words`` with ``diel``, ``python`` and ``mpiexec`` this environment's (also after
    ``mpiexec -n K``)."""
    if not words:
        return words
    if words[0] == "mpiexec":
        count = words.index("-n") + 2 if "-n" in words else 1
        return [find_mpiexec(), *words[1:count], *program(words[count:])]
    if words[0] == "diel":
        return [sys.executable, "-m", "diel", *words[1:]]
    if words[0] in ("python", "python3"):
        return [sys.executable, *words[1:]]
    return words


def execute(argv: list[str], folder: Path, env: dict[str, str] | None = None,
            timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
    return subprocess.run(program(argv), cwd=folder, capture_output=True, text=True,
                          timeout=timeout, env=env or environment(folder))


@pytest.fixture(scope="session")
def world(tmp_path_factory) -> World:
    root = tmp_path_factory.mktemp("docs-world")
    (root / "home").mkdir()
    for name in ("configs", "examples"):
        shutil.copytree(REPO / name, root / name)
    runs = {}
    for argv in SESSION_RUNS:
        done = execute(list(argv), root, timeout=300)
        assert done.returncode == 0, f"{shlex.join(argv)}:\n{done.stderr[-3000:]}"
        runs[argv] = done
    for path, source in STAND_INS.items():
        shutil.copy(root / source, root / path)
    return World(root, runs)


def install_entry_points(blocks: list[Block], folder: Path) -> None:
    """The entry points of the toml blocks, installed for ``folder`` as a package would
    install them (a dist-info that importlib.metadata finds on sys.path)."""
    groups: dict[str, dict[str, str]] = {}
    for block in blocks:
        if block.language == "toml":
            for group, points in tomllib.loads(block.text).get("project", {}).get(
                    "entry-points", {}).items():
                groups.setdefault(group, {}).update(points)
    if groups:
        info = folder / "docs_example-0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: docs-example\nVersion: 0\n")
        (info / "entry_points.txt").write_text("".join(
            f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in points.items())
            for group, points in groups.items()))


_folders: dict[tuple[Path, bool], Path] = {}


def doc_folder(doc: Path, base: Path, world: World | None) -> Path:
    """The folder ``doc``'s blocks run in: its file blocks and entry points, and (with a
    world) links to the session's configs/, examples/ and results/; benchmarks/ linked."""
    key = (doc, world is not None)
    if key not in _folders:
        folder = base / f"{doc.stem}-{'world' if world else 'alone'}"
        folder.mkdir()
        (folder / "home").mkdir()
        (folder / "benchmarks").symlink_to(REPO / "benchmarks")
        if world is not None:
            for name in ("configs", "examples", "results"):
                (folder / name).symlink_to(world.root / name)
        blocks = read_blocks(doc)
        for block in blocks:
            if block.file:
                path = folder / block.file
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(block.text)
        install_entry_points(blocks, folder)
        _folders[key] = folder
    return _folders[key]


@pytest.fixture(scope="session")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("docs")


# -- commands -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Command:
    line: int
    words: list[str]


def commands(block: Block) -> list[Command]:
    """The commands of a bash block, with the line each starts on."""
    found, number, pending = [], block.line, ""
    for offset, line in enumerate(block.text.splitlines(), start=1):
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        words = shlex.split(pending + line, comments=True)
        pending = ""
        command: list[str] = []
        for word in [*words, "&&"]:
            if word == "&&":
                if command:
                    found.append(Command(number + offset, command))
                command = []
            else:
                command.append(word)
    return found


def not_run_because(words: list[str]) -> str | None:
    """Why ``words`` is not run here (:data:`NOT_RUN`, a PostgreSQL server), else None."""
    for start, why in NOT_RUN.items():
        if tuple(words[:len(start)]) == start:
            return why
    if any(re.match(r"postgresql(\+\w+)?://[^/]*@[^/?]+", word) for word in words):
        return POSTGRES_SERVER
    return None


def serve_and_stop(words: list[str], folder: Path, env: dict[str, str]) -> str:
    """Run ``diel dashboard ...`` until it prints its address, then stop it with Ctrl-C
    (SIGINT): it must have printed one and exit 0. Returns the line."""
    process = subprocess.Popen(program(words), cwd=folder, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            ready = selector.select(60)
        line = process.stdout.readline() if ready else ""   # the address, or nothing
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
        try:
            _, err = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            _, err = process.communicate()
    assert re.search(r" at (http://\S+|unix socket \S+)", line), line + err
    assert process.returncode == 0, err
    return line


def run_command(words: list[str], folder: Path, world: World) -> str:
    """Run one command of a doc by the rules (module docstring); returns a note of what
    was done, or fails the test."""
    env = environment(folder)
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    words = [str(folder / "home" / word[2:]) if word.startswith("~/") else word
             for word in words]
    command = shlex.join(words)
    assert "|" not in words, f"{command}: a pipeline; give the command alone"
    if any(re.fullmatch(r"benchmarks/\w+\.py", word) for word in words):
        done = execute([*words, "--help"], folder, env, timeout=60)
        assert done.returncode == 0, f"{command} --help:\n{done.stderr[-3000:]}"
        return f"benchmark, its arguments read: {command}"
    why = not_run_because(words)
    if why is not None:
        return f"not run ({why}): {command}"
    if words[:2] == ["diel", "dashboard"]:
        if "--socket" not in words:   # a free port: another dashboard may hold the one asked
            words = [*words, "--port", "0"]
        return f"served and stopped: {serve_and_stop(words, folder, env).strip()}"
    if tuple(words) in world.runs:
        return f"run once for the session: {command}"
    output = None
    if ">" in words:
        at = words.index(">")
        words, output = words[:at], folder / words[at + 1]
        command = f"{shlex.join(words)} > {output.name}"
    done = execute(words, folder, env)
    assert done.returncode == 0, f"{command} exited {done.returncode}:\n{done.stderr[-3000:]}"
    if output is not None:
        output.write_text(done.stdout)
    return f"ran: {command}"


SBATCH = REPO / "examples" / "slurm" / "search.sbatch"


@pytest.mark.parametrize("block", blocks_of("bash"))
def test_bash_block_runs(block: Block, world: World, scratch: Path) -> None:
    if block.text.startswith("#SBATCH"):   # an excerpt of the batch script, with "..."
        def code(line: str) -> str:   # the line without its comment
            return re.sub(r"\s+#.*$", "", line).strip()
        script = {code(line) for line in SBATCH.read_text().splitlines()}
        missing = [line for line in block.text.splitlines()
                   if code(line) not in script and line.strip() != "..."]
        assert missing == [], f"{block.where}: not lines of {SBATCH.relative_to(REPO)}: {missing}"
        return
    folder = doc_folder(block.doc, scratch, world)
    found = commands(block)
    assert found, f"{block.where}: no command"
    for command in found:
        print(f"{block.doc.name}:{command.line}:", run_command(list(command.words), folder, world))


# -- python ---------------------------------------------------------------------------------

def ran_by_a_command(block: Block) -> bool:
    """Whether a bash block of the same doc runs the file ``block`` is."""
    return any(block.file in command.words for other in read_blocks(block.doc)
               if other.language == "bash" for command in commands(other))


def call_trial_function(block: Block) -> None:
    namespace: dict[str, Any] = dict(OPEN_NAMES)
    exec(compile(block.text, block.where, "exec"), namespace)
    trial = Trial(params=dict(TRIAL_PARAMS), number=0, study="docs")
    result = namespace["objective"](trial)
    assert result == {"accuracy": 0.9, "loss": 0.3} and trial.last_step >= 1, result


@pytest.mark.parametrize("block", blocks_of("python"))
def test_python_block_runs(block: Block, world: World, scratch: Path) -> None:
    folder = doc_folder(block.doc, scratch, world)
    if block.file and Path(block.file).name.startswith("test_"):
        done = execute(["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", block.file],
                       folder)
        assert done.returncode == 0, f"{block.where}:\n{done.stdout[-3000:]}{done.stderr[-2000:]}"
        return
    if block.file and ran_by_a_command(block):
        return   # the bash block runs it
    if re.search(r"^def objective\(trial\)", block.text, re.MULTILINE):
        call_trial_function(block)
        return
    script = folder / f"snippet_{block.line}.py"
    script.write_text(block.text)
    done = execute(["python", "-c", "import runpy, sys; runpy.run_path(sys.argv[1])",
                    str(script)], folder)
    assert done.returncode == 0, f"{block.where}:\n{done.stderr[-3000:]}"


# -- yaml, toml, text -----------------------------------------------------------------------

def is_workflow(block: Block) -> bool:
    """Whether ``block`` is a yaml block holding a whole workflow (a top-level
    ``modules:``), not a fragment of one."""
    data = load_yaml(block.text) if block.language == "yaml" else None
    return isinstance(data, dict) and "modules" in data


# ``diel validate FILE`` in each FOLDER (a JSON list of [FOLDER, FILE]) with FOLDER's home,
# answered as a JSON list of [exit status, stderr]: one interpreter for them all. What a
# workflow's modules import from its folder is forgotten before the next folder's.
VALIDATE_EACH = """
import contextlib, io, json, os, sys
from diel.cli import main
answers = []
for folder, name in json.loads(sys.argv[1]):
    os.chdir(folder)
    os.environ["HOME"] = os.path.join(folder, "home")
    sys.path.insert(0, folder)
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            code = main(["validate", name])
        except SystemExit as stop:
            code = stop.code
    sys.path.remove(folder)
    for module in [m for m in sys.modules.values()
                   if (getattr(m, "__file__", None) or "").startswith(folder + os.sep)]:
        del sys.modules[module.__name__]
    answers.append([code, err.getvalue()])
print(json.dumps(answers))
"""


@pytest.fixture(scope="session")
def validated(scratch: Path) -> dict[str, tuple[int, str]]:
    """Each whole workflow among the yaml blocks, written to its doc's folder and checked
    by ``diel validate`` there: its exit status and stderr, by the block's place. One
    process validates them all (a ``diel`` process a block cost ~0.6 s of CPU in
    imports alone)."""
    workflows = [block for block in ALL_BLOCKS if is_workflow(block)]
    files = []
    for block in workflows:
        folder = doc_folder(block.doc, scratch, None)
        (folder / f"workflow_{block.line}.yaml").write_text(block.text)
        files.append([str(folder), f"workflow_{block.line}.yaml"])
    done = execute(["python", "-c", VALIDATE_EACH, json.dumps(files)], scratch, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    answers = json.loads(done.stdout.splitlines()[-1])
    return {block.where: (code, err) for block, (code, err) in zip(workflows, answers)}


@pytest.mark.parametrize("block", blocks_of("yaml"))
def test_yaml_block_is_a_valid_workflow_or_fragment(block: Block, validated) -> None:
    data = load_yaml(block.text)
    assert isinstance(data, dict), f"{block.where}: not a mapping"
    if "modules" not in data:
        return   # a fragment: read as a mapping is all there is to check
    code, err = validated[block.where]
    assert code == 0, f"{block.where}: {err[-3000:]}"


@pytest.mark.parametrize("block", blocks_of("toml"))
def test_toml_block_reads(block: Block) -> None:
    tomllib.loads(block.text)


def test_every_block_says_what_it_is() -> None:
    """Each fenced block carries one of the languages the tests know (``text`` for what
    is not run), so nothing slips past them unchecked."""
    unknown = [f"{b.where}: {b.language or 'no language'}" for b in ALL_BLOCKS
               if b.language not in LANGUAGES]
    assert unknown == [], "tag these blocks (" + ", ".join(LANGUAGES) + "):\n" + "\n".join(unknown)


def test_the_rules_are_met_by_some_block() -> None:
    """Every rule of :data:`NOT_RUN` and :data:`STAND_INS` is used by a doc: a rule no
    doc needs any more is removed, not kept as a way around."""
    words = [c.words for b in ALL_BLOCKS if b.language == "bash" for c in commands(b)]
    unused = [" ".join(start) for start in NOT_RUN
              if not any(tuple(w[:len(start)]) == start for w in words)]
    unused += [path for path in STAND_INS if not any(path in w for w in words)]
    assert unused == [], textwrap.shorten(", ".join(unused), 500)
