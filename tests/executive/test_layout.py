"""Rank layout and the two-level communicator split, checked inside real MPI jobs."""

from __future__ import annotations

import json

import pytest

from diel.executive.config import parse_workflow
from diel.executive.layout import Layout
from tests.helpers.launch import run_diel

PROBE = "tests.executive.probes:record_comms"


def workflow_yaml(shapes: list[tuple[str, int, int]], out) -> str:
    lines = ["modules:"]
    for name, size, copies in shapes:
        lines.append(f"  {name}: {{function: '{PROBE}', size: {size}, copies: {copies}, "
                     f"settings: {{out: '{out}'}}}}")
    return "\n".join(lines) + "\n"


def expected_views(shapes: list[tuple[str, int, int]]) -> dict[int, dict]:
    views, world = {}, 0
    for name, size, copies in shapes:
        module_members = list(range(world, world + size * copies))
        for copy in range(copies):
            copy_members = list(range(world, world + size))
            for rank in range(size):
                views[world] = {"world_rank": world, "module": name, "copy": copy, "rank": rank,
                                "size": size, "comm_rank": rank, "comm_size": size,
                                "copy_members": copy_members, "module_members": module_members}
                world += 1
    return views


LAYOUTS = {
    "1+2x2+1": [("head", 1, 1), ("workers", 2, 2), ("tail", 1, 1)],
    "1+1x3": [("master", 1, 1), ("workers", 1, 3)],
}


@pytest.mark.mpi
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_communicators_match_the_layout(tmp_path, name):
    shapes = LAYOUTS[name]
    path = tmp_path / "layout.yaml"
    path.write_text(workflow_yaml(shapes, tmp_path))
    expected = expected_views(shapes)
    result = run_diel("run", str(path), n=len(expected), timeout=60)
    assert result.returncode == 0, result.stderr
    seen = {int(p.stem[4:]): json.loads(p.read_text()) for p in tmp_path.glob("rank*.json")}
    assert seen == expected


def test_layout_lookups_both_ways(tmp_path):
    workflow = parse_workflow({"modules": {
        "a": {"function": "x:y"}, "b": {"function": "x:y", "size": 2, "copies": 2}}},
        tmp_path / "w.yaml")
    layout = Layout(workflow)
    assert layout.total == 5
    assert layout.world_rank("b", copy=1, rank=1) == 4
    assert layout.world_ranks("b", copy=0) == [1, 2]
    assert layout.of(3).module == "b" and layout.of(3).copy == 1 and layout.of(3).rank == 0
    with pytest.raises(ValueError, match="copies 0..1 and ranks 0..1 per copy; got copy=2"):
        layout.world_rank("b", copy=2)
    with pytest.raises(ValueError, match="no module named 'c'"):
        layout.world_rank("c")
