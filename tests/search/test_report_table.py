"""The final report's table (diel.search.report) and the terminal it is sized for
(diel.search.terminal)."""

from __future__ import annotations

import io

from diel.search.report import more_line, trial_table
from diel.search.terminal import DEFAULT_WIDTH, terminal_of


def row(number: int, error: str | None = None, **params) -> dict:
    return {"number": number, "status": "ok", "objective": 0.9 - number / 100,
            "accuracy": 0.91, "loss": 0.25, "time": 3.5, "epoch": 8, "worker": 0,
            "params": {"learning_rate": 0.3, "activation": "relu", "dataset": "mnist5k",
                       **params}, "metrics": {"train_accuracy": 0.96}, "error": error}


def test_the_columns_that_matter_come_first_and_the_table_fits():
    rows = [row(22), row(18)]
    table, left_out = trial_table(rows, ["learning_rate", "activation"], None, 60)
    lines = table.splitlines()
    assert lines[0].split() == ["number", "objective", "learning_rate", "activation",
                                "accuracy", "loss"]
    assert all(len(line) <= 60 for line in lines) and len(lines) == 4
    assert left_out == 5   # time, epoch, worker, dataset, train_accuracy
    wide, none_left = trial_table(rows, ["learning_rate", "activation"], None, 200)
    assert none_left == 0 and wide.splitlines()[0].split()[-2:] == ["dataset", "train_accuracy"]
    assert "error" not in wide


def test_an_error_column_only_when_some_trial_has_one_and_objectives_each_a_column():
    rows = [{**row(1, error="Traceback\n  ...\nValueError: " + "x" * 100),
             "objectives": {"accuracy": 0.9, "cost": 2.0}}]
    table, _ = trial_table(rows, ["learning_rate"], ["accuracy", "cost"], 400)
    header = table.splitlines()[0].split()
    assert header[:4] == ["number", "accuracy", "cost", "learning_rate"]
    assert header[-1] == "error" and header.count("accuracy") == 1
    assert table.splitlines()[2].endswith("...") and "\n  ..." not in table


def test_the_report_names_the_command_with_every_column(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert more_line(f"sqlite:///{tmp_path}/results/wf.db", "wf", 5, False) == \
        "more: diel results results/wf.db --study wf --status ok --top 5"
    assert more_line("postgresql://db/x", "wf", None, True) == \
        "more: diel results postgresql://db/x --study wf --pareto"


def test_the_width_is_columns_else_100_for_output_that_is_no_terminal(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    assert terminal_of(io.StringIO()).width == DEFAULT_WIDTH == 100
    assert not terminal_of(io.StringIO()).live
    monkeypatch.setenv("COLUMNS", "72")
    assert terminal_of(io.StringIO()).width == 72
