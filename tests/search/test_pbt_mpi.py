"""Population-based training under mpiexec: two members on two worker copies, the worse
exploiting the better at every interval, the job killed once exploits have happened and
run again to the end; the lineage in the database matches what the members trained."""

from __future__ import annotations

import json
import re
import sqlite3
import time
from pathlib import Path

import pytest

from diel.results import get_storage
from tests.helpers.launch import run_diel
from tests.helpers.search import kill_job, quiet, start_job, trials, workflow

EPOCHS = 16
SEARCH = """\
      strategy: {pbt: {interval: 2, quantile: 0.5}}
      space: {lr: {loguniform: [0.0001, 0.1]}}
      objective: accuracy
      seed: 4
      progress_interval: 3600"""


def foreign_segments(database: Path) -> int:
    """Segments copied from another member, so far (0 while the database is made)."""
    try:
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
            return db.execute("SELECT count(*) FROM segments WHERE parent_trial IS NOT NULL "
                              "AND parent_trial != (SELECT number FROM trials WHERE "
                              "trials.id = segments.trial_id)").fetchone()[0]
    except sqlite3.Error:
        return 0


@pytest.mark.mpi
@pytest.mark.slow
def test_a_killed_pbt_search_reruns_to_the_end_with_its_lineage_intact(tmp_path):
    path = workflow(tmp_path, SEARCH, f"      pace: 0.3\n      epochs: {EPOCHS}",
                    function="tests.search.probe_pbt:member")
    job = start_job(path, tmp_path / "killed.out")
    try:
        deadline = time.monotonic() + 90
        while not foreign_segments(tmp_path / "wf.db") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert foreign_segments(tmp_path / "wf.db"), \
            (tmp_path / "killed.out").read_text()[-3000:]
    finally:
        kill_job(job, path)
    assert "running" in {row["status"] for row in trials(tmp_path)}   # killed mid-way
    rerun = run_diel("run", str(path), n=4, timeout=180)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    quiet(rerun.stdout + rerun.stderr)
    resumed = re.search(r"resuming study wf: .* \((\d+) from a checkpoint\)", rerun.stderr)
    assert resumed and int(resumed.group(1)) >= 1, rerun.stderr[-3000:]
    rows = {row["number"]: row for row in trials(tmp_path)}
    assert sorted(rows) == [0, 1] and {row["status"] for row in rows.values()} == {"ok"}
    assert all(row["epoch"] == EPOCHS for row in rows.values())
    lines = [json.loads(line) for line in (tmp_path / "trained.log").read_text().splitlines()]
    store = get_storage(f"sqlite:///{tmp_path / 'wf.db'}")
    try:
        lineage = {number: store.segments("wf", number) for number in rows}
    finally:
        store.close()
    exploits = 0
    for number, segments in lineage.items():
        assert [s.index for s in segments] == list(range(len(segments)))
        assert (segments[0].from_step, segments[0].parent_trial) == (0, None)
        assert segments[-1].params == rows[number]["params"]
        for segment in segments[1:]:
            assert segment.parent_step == segment.from_step and segment.parent_trial is not None
            if segment.parent_trial == number:   # resampled: its donor finished first
                continue
            exploits += 1
            restored = {line["w"] for line in lines if line.get("trial") == number and
                        line.get("restored") == segment.from_step}
            donor = {line["w"] for line in lines if line.get("trial") == segment.parent_trial
                     and line.get("epoch") == segment.from_step}
            assert restored & donor, (number, segment)   # it went on from the donor's state
    assert exploits >= 2
    best = max(rows.values(), key=lambda row: row["accuracy"])
    assert "best 2 of study wf" in rerun.stdout
    assert f"schedule of trial {best['number']} (diel results --lineage" in rerun.stdout
