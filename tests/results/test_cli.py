"""``diel results`` / ``diel studies`` through register() and argparse, on SQLite and
PostgreSQL; and through the real command for what only a process shows (exit status,
files left untouched, a closed pipe)."""

from __future__ import annotations

import argparse
import contextlib
import csv
import hashlib
import io
import json
import os
import runpy
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from diel.cli import main
from diel.results import ResultRecord, ResultsStore, TrialStart
from diel.results.cli import register
from tests.helpers.launch import REPO, run_diel, run_diel_in_process


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="diel")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_every_option_has_help():
    parser = argparse.ArgumentParser(prog="diel")
    subparsers = parser.add_subparsers()
    register(subparsers)
    for name in ("results", "studies"):
        for action in subparsers.choices[name]._actions:
            assert action.help, f"{name} {action.dest} has no help"


def test_table_is_aligned_and_sorted_best_first(shared_results_db, capsys):
    db = shared_results_db
    assert run("results", str(db), "--study", "grid", "--top", "3") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["number", "status", "objective", "accuracy"]
    assert set(lines[1]) == {"-", " "}
    assert [line.split()[0] for line in lines[2:]] == ["1", "0", "2"]
    assert len({line.index(line.split()[2]) + len(line.split()[2]) for line in lines[2:]}) == 1
    assert run("results", str(db), "--status", "failed") == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith("OOM")  # last line of the error


def test_filters_sort_and_status(shared_results_db, capsys):
    db = shared_results_db
    assert run("results", db, "--study", "grid", "--where", "activation=relu",
               "--where", "lr>=0.01", "--sort", "lr:desc", "--format", "json") == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["number"] for r in rows] == [0, 1]
    assert run("results", db, "--status", "failed", "--format", "json") == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["error"] for r in rows] == ["boom\nOOM"]


def test_a_path_and_a_sqlite_url_name_the_same_file(shared_db, capsys):
    db = shared_db
    assert run("results", str(db), "--format", "json") == 0
    by_path = json.loads(capsys.readouterr().out)
    assert run("results", f"sqlite:///{db}", "--format", "json") == 0
    assert json.loads(capsys.readouterr().out) == by_path and len(by_path) == 8


def test_csv_export(shared_results_db, capsys):
    db = shared_results_db
    assert run("results", db, "--format", "csv") == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 8 and rows[0]["study"] in ("grid", "loss")
    grid = [r for r in rows if r["study"] == "grid"]
    assert grid[0]["number"] == "1" and grid[0]["activation"] == "relu" and grid[0]["f1"] == "0.95"


@pytest.mark.parametrize("argv, words", [
    (["--where", "lr<<0.1"], "malformed filter 'lr<<0.1'"),
    (["--where", "activation<relu"], "< compares numbers, got the string 'relu'"),
    (["--sort", "lr:sideways"], "malformed sort"),
    (["--where", "accuracy='0.9'"], "write it unquoted to compare numbers: accuracy=0.9"),
    (["--where", "activation=3"], "quote the value to compare text: activation=\"3\""),
    (["--where", "learning_rate<0.1"], "unknown key 'learning_rate' in filter"),
    (["--where", "activaton=relu"], "(did you mean 'activation'?); the keys in "),
    (["--sort", "acc:desc"], "unknown key 'acc' in sort 'acc:desc'"),
    (["--sort", "params.f1"], "parameters: activation, layers, lr; metrics: f1"),
    (["--study", "gird"], "no study 'gird' in "),
])
def test_usage_errors_exit_2_with_one_line(shared_results_db, capsys, argv, words):
    assert run("results", shared_results_db, *argv) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("top", ["0", "-1", "99999999999999999999999", "9223372036854775808",
                                 "1.5", "nan", "", "1e3"])
def test_a_top_out_of_range_is_one_line_and_exit_2(shared_db, capsys, top):
    with pytest.raises(SystemExit) as stop:
        main(["results", str(shared_db), "--top", top])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.endswith(f"argument --top: expected a whole number from 1 to "
                        f"9223372036854775807, got {top!r}")


def test_the_largest_top_lists_every_trial(shared_results_db, capsys):
    assert run("results", shared_results_db, "--top", "9223372036854775807", "--format", "json") == 0
    assert len(json.loads(capsys.readouterr().out)) == 8


@pytest.mark.parametrize("where, numbers", [
    ("number>1e400", []),
    ("number<1e400", [0, 1, 2, 3, 4, 5]),
    ("number<" + "1" * 40, [0, 1, 2, 3, 4, 5]),
    ("number>" + "1" * 40, []),
    ("number>-" + "1" * 40, [0, 1, 2, 3, 4, 5]),
    ("epoch=" + "1" * 40, []),
    ("lr<" + "1" * 40, [0, 1, 2, 3, 4, 5]),
    ("accuracy<1e400", [0, 1, 2, 4]),
    ("number>9223372036854775807", []),
])
def test_numbers_beyond_the_database_are_answered(shared_results_db, capsys, where, numbers):
    """Past 64 bits (SQLite's integers) and past a double's range, a filter is answered
    as the comparison says, on SQLite and PostgreSQL (whose trial numbers are 32-bit)."""
    assert run("results", shared_results_db, "--study", "grid", "--where", where, "--sort", "number",
               "--format", "json") == 0
    assert [row["number"] for row in json.loads(capsys.readouterr().out)] == numbers


def test_missing_database_exits_2(tmp_path, capsys):
    assert run("results", str(tmp_path / "nope.db")) == 2
    assert "no results database" in capsys.readouterr().err
    assert run("studies", str(tmp_path / "nope.db")) == 2


def test_studies(shared_results_db, capsys):
    db = shared_results_db
    assert run("studies", db) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["name", "strategy", "direction"]
    assert [line.split()[0] for line in lines[2:]] == ["grid", "loss"]
    assert run("studies", str(db), "--format", "json") == 0
    assert json.loads(capsys.readouterr().out)[0]["ok"] == 3


def test_paused_trials_are_listed_and_counted(db_url, capsys):
    """A paused trial (stopped with its progress in a checkpoint) shows in ``diel
    results`` (``--status paused``) and in a ``paused`` column of ``diel studies``, which
    appears only where some study has paused trials."""
    store = ResultsStore(db_url)
    state = store.open_study("p", "grid", "accuracy", "maximize", {})
    store.record(state.study_id, starts=[TrialStart(n, {"x": n}, f'{{"x":{n}}}') for n in (0, 1)])
    store.record(state.study_id, results=[ResultRecord(0, "paused", accuracy=0.4, epoch=3),
                                          ResultRecord(1, "ok", 0.9, accuracy=0.9)])
    store.close()
    assert run("results", db_url, "--status", "paused", "--format", "json") == 0
    [row] = json.loads(capsys.readouterr().out)
    assert (row["number"], row["status"], row["epoch"], row["finished_at"]) == (0, "paused", 3, None)
    assert run("studies", db_url) == 0
    header, _, line = capsys.readouterr().out.splitlines()
    columns = dict(zip(header.split(), line.split()))
    assert (columns["ok"], columns["paused"], columns["running"]) == ("1", "1", "0")
    assert header.split().index("paused") == header.split().index("pruned") + 1


def test_a_missing_driver_exits_2_naming_what_to_install(capsys):
    assert run("results", "mysql+mysqldb://u@h/d") == 2
    err = capsys.readouterr().err
    assert "its driver is not installed" in err and len(err.strip().splitlines()) == 1


def digest(folder: Path) -> dict[str, str]:
    """Every file in ``folder`` with the SHA-256 of its bytes."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}


def foreign_sqlite(path: Path, journal: str) -> None:
    """Another program's SQLite database (journal mode ``journal``)."""
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA journal_mode={journal}")
    conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    conn.execute("INSERT INTO notes (body) VALUES (?)", ("keep me",))
    conn.commit()
    conn.close()


@pytest.mark.parametrize("kind, words", [
    ("empty", "the file is empty"),
    ("text", "not a SQLite database file"),
    ("garbage", "not a SQLite database file"),
    ("foreign", "no studies or trials table (its tables: notes)"),
    ("foreign-wal", "no studies or trials table (its tables: notes)"),
])
def test_not_a_results_database_exits_2_and_stays_byte_for_byte(tmp_path, kind, words):
    refused_byte_for_byte(tmp_path, kind, words, run_diel_in_process)


def test_the_command_leaves_a_foreign_database_byte_for_byte(tmp_path):
    """As above, by the command itself: the process ends and has left no byte changed."""
    refused_byte_for_byte(tmp_path, "foreign-wal", "no studies or trials table (its tables: "
                                                   "notes)", run_diel)


def refused_byte_for_byte(tmp_path: Path, kind: str, words: str, launch) -> None:
    """``diel results`` and ``diel studies``, started by ``launch``, refuse a file of
    ``kind`` in ``tmp_path`` with one line ending in ``words``, and change nothing there."""
    path = tmp_path / "data.db"
    if kind == "empty":
        path.touch()
    elif kind == "text":
        path.write_text("name,score\nada,3\n")
    elif kind == "garbage":
        path.write_bytes(bytes(range(256)) * 8)
    else:
        foreign_sqlite(path, "wal" if kind == "foreign-wal" else "delete")
    before = digest(tmp_path)
    for command in ("results", "studies"):
        done = launch(command, str(path))
        assert done.returncode == 2, done.stderr
        assert done.stderr == f"diel {command}: error: {path} is not a diel results " \
                              f"database: {words}\n"
        assert done.stdout == ""
    assert digest(tmp_path) == before  # no byte changed, no -wal/-shm/-journal file made


def closed_pipe_start(*argv: str) -> subprocess.Popen:
    """Start ``diel ARGV`` with stdout a pipe whose reader has gone (``| head`` done)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.Popen([sys.executable, "-m", "diel", *argv], stdout=write,
                                stderr=subprocess.PIPE, text=True, cwd=REPO)
    finally:
        os.close(write)


@pytest.fixture(scope="module")
def big_database(tmp_path_factory) -> Path:
    """A database whose table is far bigger than a pipe's buffer (only read)."""
    path = tmp_path_factory.mktemp("big") / "big.db"
    n = 2000
    store = ResultsStore(f"sqlite:///{path}")
    state = store.open_study("big", "grid", "accuracy", "maximize", {})
    store.record(state.study_id, starts=[TrialStart(i, {"x": i}, str(i)) for i in range(n)])
    store.record(state.study_id, results=[ResultRecord(i, "ok", i / n) for i in range(n)])
    store.close()
    return path


def test_output_into_a_closed_pipe_ends_quietly(big_database):
    commands = (["results", str(big_database)], ["studies", str(big_database)],
                ["validate", str(REPO / "configs" / "mnist_grid.yaml")])
    jobs = [closed_pipe_start(*argv) for argv in commands]   # at once: each waits on imports
    try:
        for argv, job in zip(commands, jobs):
            _, err = job.communicate(timeout=60)
            assert job.returncode == 141, (argv, err)  # 128 + SIGPIPE, as `yes | head`
            assert err == "", argv
    finally:
        for job in jobs:
            job.kill()
            job.wait(timeout=30)


def test_head_reads_the_first_line_and_diel_ends_quietly(big_database):
    job = subprocess.Popen([sys.executable, "-m", "diel", "results", str(big_database)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    try:
        first = job.stdout.readline()
        job.stdout.close()  # what head -1 does after its line
        _, err = job.communicate(timeout=60)
    finally:
        job.kill()
        job.wait(timeout=30)
    assert first.split()[:2] == [b"number", b"status"]
    assert err == b"" and job.returncode == 141


def run_example(path: Path, *args: str) -> subprocess.CompletedProcess:
    """Run the script ``path`` with ``args`` as ``python path args`` would, in this
    process (runpy): its exit status, stdout and stderr (``sys.exit("message")`` is status
    1 with the message on stderr, as the interpreter ends on it)."""
    out, err = io.StringIO(), io.StringIO()
    argv = sys.argv
    sys.argv = [str(path), *args]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                runpy.run_path(str(path), run_name="__main__")
                code = 0
            except SystemExit as stop:
                code = 0 if stop.code is None else stop.code
                if not isinstance(code, int):
                    print(code, file=sys.stderr)
                    code = 1
    finally:
        sys.argv = argv
    return subprocess.CompletedProcess([str(path), *args], code, out.getvalue(), err.getvalue())


def test_the_query_example_reads_a_grid_of_the_shipped_config(tmp_path):
    url = f"sqlite:///{tmp_path / 'mnist_grid.db'}"
    store = ResultsStore(url)
    state = store.open_study("mnist_grid", "grid", "accuracy", "maximize", {})
    grid = [{"learning_rate": lr, "layers": 1, "width": 64, "activation": act}
            for lr in (0.03, 0.1, 0.3) for act in ("relu", "tanh")]
    store.record(state.study_id, starts=[TrialStart(n, p, str(n)) for n, p in enumerate(grid)])
    store.record(state.study_id, results=[ResultRecord(n, "ok", 0.8 + n / 100, 1.0,
                                                       0.8 + n / 100) for n in range(6)])
    store.close()
    example = REPO / "examples" / "query_results.py"
    done = run_example(example, str(tmp_path / "mnist_grid.db"))
    assert done.returncode == 0, done.stderr
    assert "2 relu trials with learning_rate >= 0.1; the best reached accuracy 0.84" in done.stdout
    assert "learning_rate: 0.3: 0.845 (2), 0.1: 0.825 (2), 0.03: 0.805 (2)" in done.stdout
    (tmp_path / "other.db").write_text("not a database")
    done = run_example(example, str(tmp_path / "other.db"))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "is not a diel results database" in done.stderr
