"""Trials with different parameter sets (a conditional space, define-by-run): a
parameter a trial does not have is missing, never null-as-zero: blank in tables and
CSV, absent in JSON, matched by no comparison but ``=null``, sorted after the values
either way; on SQLite and PostgreSQL."""

from __future__ import annotations

import csv
import io
import json

import pytest

import diel.results
from tests.helpers.launch import run_diel_in_process
from tests.helpers.populations import fill_conditional


@pytest.fixture(scope="module")
def conditional(module_databases) -> str:
    return fill_conditional(module_databases())


@pytest.mark.parametrize("where, numbers", [
    ("svc_c<1", [0, 3]),          # the forests have no svc_c: not below 1
    ("svc_c!=0", [0]),            # nor different from 0
    ("svc_c=0", [3]),             # a zero that is there is not a missing one
    ("svc_c<=0", [3]),
    ("svc_c=null", [1, 2]),       # missing, as documented
    ("svc_c!=null", [0, 3]),
    ("rf_depth>=1", [1]),         # suggested as it ran: a parameter like any other
    ("params.rf_depth!=8", []),
])
def test_a_filter_on_a_parameter_leaves_out_the_trials_without_it(conditional, where, numbers):
    with diel.results.open(conditional) as results:
        found = results.trials(study="conditional", where=[where], sort="number")
        assert results.count(study="conditional", where=[where]) == len(numbers)
    assert [t["number"] for t in found] == numbers


def test_sorting_by_a_parameter_puts_the_trials_without_it_last(conditional):
    with diel.results.open(conditional) as results:
        for order in ("asc", "desc"):
            numbers = [t["number"] for t in results.trials(
                study="conditional", sort=f"svc_c:{order}")]
            assert numbers[2:] in ([1, 2], [2, 1]), (order, numbers)
        assert [t["number"] for t in results.trials(study="conditional", sort="svc_c")][:2] \
            == [3, 0]


def test_tables_leave_a_missing_parameter_blank(tmp_path):
    db = fill_conditional(f"sqlite:///{tmp_path / 'c.db'}")
    table = run_diel_in_process("results", db, "--sort", "number").stdout.splitlines()
    header = table[0]
    column = header.index("svc_c")
    rows = {line.split()[0]: line for line in table[2:]}
    cell = {number: line[column:column + 5].strip() for number, line in rows.items()}
    assert (cell["1"], cell["3"]) == ("", "0")   # missing is blank; a zero is 0
    found = list(csv.DictReader(io.StringIO(run_diel_in_process(
        "results", db, "--sort", "number", "--format", "csv").stdout)))
    assert [(r["svc_c"], r["rf_depth"]) for r in found] == [("0.5", ""), ("", "8"), ("", ""),
                                                            ("0", "")]
    rows = json.loads(run_diel_in_process("results", db, "--sort", "number", "--format",
                                          "json").stdout)
    assert [sorted(r["params"]) for r in rows] == [["classifier", "svc_c"],
                                                   ["classifier", "rf_depth"], ["classifier"],
                                                   ["classifier", "svc_c"]]
