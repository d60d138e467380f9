"""A trial's lineage (schema 7's segments) as the reader gives it
(:meth:`Results.lineage`, on SQLite and PostgreSQL) and as ``diel results --lineage``
prints it."""

from __future__ import annotations

import csv
import io
import json
import sqlite3

import pytest

import diel.results
from diel.results import ResultsStore, Segment, TrialStart
from tests.helpers.launch import run_diel_in_process
from tests.helpers.populations import DEPTHS, fill_conditional, fill_population


@pytest.fixture(scope="module")
def population(module_databases) -> str:
    """Studies ``pbt`` and ``conditional``, once per module and backend."""
    url = fill_population(module_databases())
    return fill_conditional(url)


@pytest.fixture(scope="module")
def population_file(tmp_path_factory) -> str:
    """The same studies in a SQLite file, for the command."""
    path = tmp_path_factory.mktemp("lineage") / "pbt.db"
    fill_conditional(fill_population(f"sqlite:///{path}"))
    return str(path)


def test_the_reader_gives_each_members_segments(population):
    with diel.results.open(population) as results:
        assert results.lineage(4) == [Segment(4, 0, 0, 12, {"lr": 0.02, "momentum": 0.9})]
        assert results.lineage(3, "pbt") == [
            Segment(3, 0, 0, 4, {"lr": 0.025, "momentum": 0.9}),
            Segment(3, 1, 4, 8, {"lr": 0.012, "momentum": 0.9}, parent_trial=1, parent_step=4),
            Segment(3, 2, 8, 12, {"lr": 0.03, "momentum": 0.9}, parent_trial=0, parent_step=8)]
        assert [(s.from_step, s.to_step, s.parent_trial) for s in
                results.lineage(2, study="pbt")] == [(0, 4, None), (4, 12, 0)]
        assert sorted(results.segments("pbt")) == [0, 1, 2, 3, 4]
        assert results.trials(study="pbt", sort="number")[3]["params"] == \
            {"lr": 0.03, "momentum": 0.9}   # the trial's params are its last segment's


def test_the_reader_refuses_a_trial_it_cannot_name(population):
    with diel.results.open(population) as results:
        with pytest.raises(ValueError, match=r"trial 0 is in several studies "
                                             r"\(conditional, pbt\); name its study"):
            results.lineage(0)
        with pytest.raises(ValueError, match=r"no trial 9 in study 'pbt' \(it has trials "
                                             r"numbered 0 to 4\)"):
            results.lineage(9, study="pbt")
        with pytest.raises(ValueError, match="no study 'nope'.*its studies: conditional, pbt"):
            results.lineage(1, study="nope")
        assert results.lineage(1, study="conditional") == [
            Segment(1, 0, 0, None, {"classifier": "forest", "rf_depth": 8})]


def test_the_reader_gives_the_distributions_suggested(population):
    with diel.results.open(population) as results:
        assert results.distributions("conditional") == {1: {"rf_depth": DEPTHS}}
        assert results.distributions("pbt") == {}


def test_lineage_prints_a_schedule_that_reads_at_80_columns(population_file):
    done = run_diel_in_process("results", population_file, "--lineage", "3", "--study", "pbt")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "trial 3 of study 'pbt': 3 segments"
    assert lines[1].split() == ["from", "to", "parent", "parameters"]
    assert [line.split() for line in lines[3:]] == [
        ["0", "4", "lr=0.025,", "momentum=0.9"],   # the first segment: every parameter
        ["4", "8", "trial", "1", "step", "4", "lr=0.012"],   # then only what changed
        ["8", "12", "trial", "0", "step", "8", "lr=0.03"]]
    assert max(map(len, lines)) <= 80


def test_a_long_schedule_wraps_under_its_column(tmp_path):
    url = f"sqlite:///{tmp_path / 'wide.db'}"
    store = ResultsStore(url)
    study = store.open_study("wide", "pbt", "accuracy", "maximize", {}).study_id
    wide = {f"parameter_{i}": 0.001 * i for i in range(12)}
    store.record(study, starts=[TrialStart(0, wide, "k")])
    store.close()
    lines = run_diel_in_process("results", url, "--lineage", "0").stdout.splitlines()
    assert len(lines) > 4 and max(map(len, lines)) <= 80
    column = lines[1].index("parameters")
    assert all(line[:column].strip() == "" and line[column] != " " for line in lines[4:])
    assert " ".join(line.strip() for line in lines[3:]).count("parameter_") == 12


def test_a_trial_without_segments_says_so_in_one_line(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    store = ResultsStore(url)
    study = store.open_study("s", "grid", "accuracy", "maximize", {}).study_id
    store.record(study, starts=[TrialStart(0, {"x": 1}, "k")])
    store.close()
    with diel.results.open(url) as results:   # every trial has its first segment
        assert len(results.lineage(0)) == 1
    conn = sqlite3.connect(tmp_path / "old.db")   # as a trial written before schema 7
    conn.execute("DELETE FROM segments")
    conn.commit()
    conn.close()
    done = run_diel_in_process("results", url, "--lineage", "0")
    assert (done.returncode, done.stdout.count("\n")) == (0, 1)
    assert "trial 0 of study 's' has no segments" in done.stdout


@pytest.mark.parametrize("args, words", [
    (["--lineage", "9", "--study", "pbt"], "--lineage 9: no trial 9 in study 'pbt'"),
    (["--lineage", "0"], "--lineage 0: trial 0 is in several studies"),
    (["--lineage", "-1"], "argument --lineage: expected a whole number from 0"),
    (["--lineage", "1", "--where", "lr<1", "--top", "2"],
     "it takes --study and --format, not --top, --where"),
])
def test_a_bad_lineage_is_a_usage_error_naming_it(population_file, args, words):
    done = run_diel_in_process("results", population_file, *args)
    assert done.returncode == 2 and done.stdout == ""
    assert words in done.stderr and "Traceback" not in done.stderr


def test_a_member_that_went_on_from_its_own_state_says_own(population_file):
    done = run_diel_in_process("results", population_file, "--lineage", "1", "--study", "pbt")
    assert [line.split() for line in done.stdout.splitlines()[3:]] == [
        ["0", "8", "lr=0.05,", "momentum=0.9"], ["8", "12", "own", "step", "8", "lr=0.04"]]


def test_lineage_as_csv_and_json(population_file):
    done = run_diel_in_process("results", population_file, "--lineage", "2", "--study", "pbt",
                               "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert [(r["index"], r["from_step"], r["to_step"], r["parent_trial"], r["lr"])
            for r in rows] == [("0", "0", "4", "", "0.03333333333333333"),
                               ("1", "4", "12", "0", "0.05")]
    done = run_diel_in_process("results", population_file, "--lineage", "2", "--study", "pbt",
                               "--format", "json")
    assert json.loads(done.stdout)[1] == {
        "trial": 2, "index": 1, "from_step": 4, "to_step": 12,
        "params": {"lr": 0.05, "momentum": 0.9}, "parent_trial": 0, "parent_step": 4}
