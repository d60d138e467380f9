"""``diel results`` / ``diel studies`` through register() and argparse."""

from __future__ import annotations

import argparse
import csv
import io
import json

import pytest

from diel.results.cli import register


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


def test_table_is_aligned_and_sorted_best_first(db, capsys):
    assert run("results", str(db), "--study", "grid", "--top", "3") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["number", "status", "objective", "accuracy"]
    assert set(lines[1]) == {"-", " "}
    assert [line.split()[0] for line in lines[2:]] == ["1", "0", "2"]
    assert len({line.index(line.split()[2]) + len(line.split()[2]) for line in lines[2:]}) == 1
    assert run("results", str(db), "--status", "failed") == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith("OOM")  # last line of the error


def test_filters_sort_and_status(db, capsys):
    assert run("results", str(db), "--study", "grid", "--where", "activation=relu",
               "--where", "lr>=0.01", "--sort", "lr:desc", "--format", "json") == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["number"] for r in rows] == [0, 1]
    assert run("results", f"sqlite:///{db}", "--status", "failed", "--format", "json") == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["error"] for r in rows] == ["boom\nOOM"]


def test_csv_export(db, capsys):
    assert run("results", str(db), "--format", "csv") == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 8 and rows[0]["study"] in ("grid", "loss")
    grid = [r for r in rows if r["study"] == "grid"]
    assert grid[0]["number"] == "1" and grid[0]["activation"] == "relu" and grid[0]["f1"] == "0.95"


@pytest.mark.parametrize("argv, words", [
    (["--where", "lr<<0.1"], "malformed filter 'lr<<0.1'"),
    (["--where", "activation<relu"], "< needs a number"),
    (["--sort", "lr:sideways"], "malformed sort"),
    (["--top", "0"], "--top must be at least 1"),
])
def test_usage_errors_exit_2_with_one_line(db, capsys, argv, words):
    assert run("results", str(db), *argv) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_missing_database_exits_2(tmp_path, capsys):
    assert run("results", str(tmp_path / "nope.db")) == 2
    assert "no results database" in capsys.readouterr().err
    assert run("studies", str(tmp_path / "nope.db")) == 2


def test_studies(db, capsys):
    assert run("studies", str(db)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["name", "strategy", "direction"]
    assert [line.split()[0] for line in lines[2:]] == ["grid", "loss"]
    assert run("studies", str(db), "--format", "json") == 0
    assert json.loads(capsys.readouterr().out)[0]["ok"] == 3
