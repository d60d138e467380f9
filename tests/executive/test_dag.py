"""Groups run as a DAG: a diamond of dependencies with iterations runs in the right order."""

from __future__ import annotations

from collections import defaultdict

import pytest

from tests.helpers.launch import run_diel

pytestmark = pytest.mark.mpi

ORDER = "tests.executive.probes:record_order"


def test_diamond_dag_runs_in_dependency_order(tmp_path):
    order_file = tmp_path / "order.txt"
    path = tmp_path / "diamond.yaml"
    path.write_text(f"""
modules:
  source: {{function: '{ORDER}', settings: {{out: '{order_file}'}}}}
  left:   {{function: '{ORDER}', size: 2, settings: {{out: '{order_file}', sleep: 0.3}}}}
  right:  {{function: '{ORDER}', settings: {{out: '{order_file}'}}}}
  sink:   {{function: '{ORDER}', settings: {{out: '{order_file}'}}}}
groups:
  join:  {{modules: [sink], after: [left_g, right_g], iterations: 2}}
  start: {{modules: [source], iterations: 2}}
  left_g:  {{modules: [left], after: [start], iterations: 3}}
  right_g: {{modules: [right], after: [start]}}
""")
    result = run_diel("run", str(path), n=5, timeout=60)
    assert result.returncode == 0, result.stderr
    runs = defaultdict(list)
    for line in order_file.read_text().splitlines():
        module, iteration, start, end = line.split()
        runs[module].append((int(iteration), float(start), float(end)))
    assert sorted(i for i, _, _ in runs["source"]) == [0, 1]
    assert sorted(i for i, _, _ in runs["left"]) == [0, 0, 1, 1, 2, 2]  # two ranks
    assert sorted(i for i, _, _ in runs["right"]) == [0]
    assert sorted(i for i, _, _ in runs["sink"]) == [0, 1]

    def first_start(module):
        return min(start for _, start, _ in runs[module])

    def last_end(module):
        return max(end for _, _, end in runs[module])

    assert last_end("source") <= first_start("left")
    assert last_end("source") <= first_start("right")
    assert max(last_end("left"), last_end("right")) <= first_start("sink")
    for module, entries in runs.items():  # iterations of one rank run in order
        by_iteration = sorted(entries)
        assert [start for _, start, _ in by_iteration] == sorted(start for _, start, _ in entries), module


def test_three_group_diamond_with_iterations(tmp_path):
    """first -> second -> third and first -> third: third waits for both paths."""
    order_file = tmp_path / "order.txt"
    path = tmp_path / "three.yaml"
    path.write_text(f"""
modules:
  a: {{function: '{ORDER}', settings: {{out: '{order_file}'}}}}
  b: {{function: '{ORDER}', size: 2, settings: {{out: '{order_file}', sleep: 0.2}}}}
  c: {{function: '{ORDER}', settings: {{out: '{order_file}'}}}}
groups:
  third: {{modules: [c], after: [first, second], iterations: 3}}
  second: {{modules: [b], after: [first], iterations: 2}}
  first: {{modules: [a], iterations: 2}}
""")
    result = run_diel("run", str(path), n=4, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = [line.split() for line in order_file.read_text().splitlines()]
    modules_in_order = [module for module, *_ in sorted(lines, key=lambda f: float(f[2]))]
    assert modules_in_order == ["a", "a", "b", "b", "b", "b", "c", "c", "c"]
    assert [int(i) for module, i, *_ in lines if module == "c"] == [0, 1, 2]
