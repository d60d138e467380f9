"""``diel studies`` shows the disk a study's kept checkpoints use: a ``checkpoints``
column (``4.0 MB``; bytes in csv and json as ``checkpoint_bytes``), deleted checkpoints
not counted, and no column where no study keeps any."""

from __future__ import annotations

import argparse
import csv
import io
import json

from diel.results import Checkpoint, ResultsStore, TrialStart
from diel.results.cli import register


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="diel")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_studies_show_the_disk_their_kept_checkpoints_use(db_url, capsys):
    store = ResultsStore(db_url)
    for name in ("a", "b"):
        store.open_study(name, "grid", "accuracy", "maximize", {})
    state = store.open_study("a", "grid", "accuracy", "maximize", {})
    store.record(state.study_id, starts=[TrialStart(n, {"x": n}, f'{{"x":{n}}}') for n in (0, 1)])
    store.record(state.study_id, checkpoints=[
        Checkpoint(0, 1, "/c/trial-0/step-1.ckpt", 9_000_000, "crc32:00000001"),
        Checkpoint(0, 2, "/c/trial-0/step-2.ckpt", 1_500_000, "crc32:00000002"),
        Checkpoint(1, 1, "/c/trial-1/step-1.ckpt", 2_500_000, "crc32:00000003")])
    store.delete_checkpoints(state.study_id, [(0, 1)])
    store.close()
    assert run("studies", db_url) == 0
    header, _, a, b = capsys.readouterr().out.splitlines()
    assert header.split().index("checkpoints") == header.split().index("updated_at") - 1
    assert "4.0 MB" in a and " B " not in a and "0 B" in b
    assert run("studies", db_url, "--format", "json") == 0
    assert [row["checkpoint_bytes"] for row in json.loads(capsys.readouterr().out)] == \
        [4_000_000, 0]
    assert run("studies", db_url, "--format", "csv") == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [row["checkpoints"] for row in rows] == ["4000000", "0"]


def test_no_checkpoints_column_without_checkpoints(db_url, capsys):
    ResultsStore(db_url).open_study("a", "grid", "accuracy", "maximize", {})
    assert run("studies", db_url) == 0
    assert "checkpoints" not in capsys.readouterr().out.splitlines()[0]
