"""Checkpoints through every runner: in the rank, in an isolated child, in a program;
resume from memory or from the file, past damaged files; reports in order; pause."""

from __future__ import annotations

import json
import logging
import mmap
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from diel.checkpoints import read, take, unpack, write
from diel.search.protocol import checkpoint_tag, prune_tag, report_tag, task_tag
from diel.worker.folder_state import FolderChanged, folder_state
from diel.worker.inprocess import InProcessRunner
from diel.worker.isolated import IsolatedRunner
from diel.worker.link import TrialLink
from diel.worker.program import ProgramRunner, ReportFile
from diel.worker.resume import resume_point
from diel.worker.serve import serve_tasks
from tests.helpers.fakespace import FakeSpace
from tests.helpers.launch import REPO, run_mpi
from tests.helpers.links import ScriptedLink
from tests.helpers.tuplespace import InProcSpace
from tests.worker.checkpointing import SIZE, counting

HERE = Path(__file__).resolve().parent


class DurableOnlySpace(FakeSpace):
    """A space that checks, as each checkpoint report is put, that its file is durable
    already: on disk, whole, with the checksum the report gives."""

    def tput(self, tag, value):
        if isinstance(value, dict) and value.get("kind") == "checkpoint":
            read(value["path"], value["checksum"])
        super().tput(tag, value)


def serve(space: FakeSpace, folder: Path, *tasks: dict) -> list[dict]:
    """Serve ``tasks`` of study ``s`` with ``counting`` in this rank; the reports put."""
    for task in tasks:
        space.tput(task_tag("s"), {"params": {"epochs": 3}, "restore": None, **task})
    space.tput(task_tag("s"), None)
    before = len(space.log)
    serve_tasks(space, "s", 0, InProcessRunner(counting), checkpoints=folder)
    reports = []
    for tag, value in space.log[before:]:
        if tag == report_tag("s"):
            reports.extend(value if isinstance(value, list) else [value])
    return reports


def restore_of(*reports: dict) -> dict:
    """A task's ``restore`` from checkpoint reports, newest first."""
    keys = ("step", "path", "nbytes", "checksum")
    newest, *older = [{key: report[key] for key in keys} for report in reports]
    return {**newest, "older": older}


def test_a_trial_in_the_rank_checkpoints_each_epoch_reported_once_durable_before_its_result(tmp_path):
    reports = serve(DurableOnlySpace(), tmp_path / "s", {"trial": 0})
    kinds = [(r["kind"], r.get("epoch", r.get("step"))) for r in reports]
    assert kinds[0] == ("start", None) and kinds[-1][0] == "result"
    checkpoints = [r for r in reports if r["kind"] == "checkpoint"]
    assert checkpoints[-1]["step"] == 3   # the last one is reported before the result
    for report in checkpoints:   # each after its epoch's report
        assert kinds.index(("epoch", report["step"])) < kinds.index(("checkpoint", report["step"]))
        assert Path(report["path"]) == tmp_path / "s" / "trial-0" / f"step-{report['step']}.ckpt"
        assert report["nbytes"] == os.path.getsize(report["path"])
    assert reports[-1]["status"] == "ok" and reports[-1]["metrics"]["resumed"] == -1


def test_a_resumed_trial_in_the_rank_starts_after_its_checkpoint(tmp_path):
    space = FakeSpace()
    first = serve(space, tmp_path / "s", {"trial": 0, "params": {"epochs": 2}})
    saved = [r for r in first if r["kind"] == "checkpoint"][-1]
    assert space.dist_keys() == []   # a finished trial's copy in memory is dropped
    again = serve(space, tmp_path / "s", {"trial": 0, "restore": restore_of(saved)})
    result = again[-1]
    assert result["metrics"]["resumed"] == 2 and result["metrics"]["total"] == 3 * SIZE
    assert [r["epoch"] for r in again if r["kind"] == "epoch"] == [3]


def test_a_paused_trial_keeps_its_copy_in_memory_and_resumes_from_it(tmp_path):
    space = FakeSpace()
    space.tput(prune_tag("s", 0), "pause")   # answered at its first report
    first = serve(space, tmp_path / "s", {"trial": 0})
    assert first[-1]["status"] == "paused" and first[-1]["epoch"] == 1
    saved = [r for r in first if r["kind"] == "checkpoint"]
    assert [r["step"] for r in saved] == [1]
    assert space.dist_keys() == [checkpoint_tag("s", 0)]
    os.unlink(saved[0]["path"])   # only the copy in memory is left
    again = serve(space, tmp_path / "s", {"trial": 0, "restore": restore_of(saved[0])})
    assert again[-1]["status"] == "ok" and again[-1]["metrics"]["resumed"] == 1
    assert again[-1]["metrics"]["total"] == 3 * SIZE


def damage(path: str) -> None:
    with open(path, "r+b") as f:
        f.seek(-10, os.SEEK_END)
        f.write(b"\xff" * 10)


def test_a_damaged_checkpoint_is_skipped_for_the_older_one_with_one_warning(tmp_path, caplog):
    space = FakeSpace()
    first = serve(space, tmp_path / "s", {"trial": 0, "params": {"epochs": 1}})
    one = [r for r in first if r["kind"] == "checkpoint"][-1]
    space.tput(task_tag("s"), {"trial": 0, "params": {"epochs": 2}, "restore": restore_of(one)})
    second = serve(space, tmp_path / "s")
    two = [r for r in second if r["kind"] == "checkpoint"][-1]
    assert (one["step"], two["step"]) == (1, 2)
    damage(two["path"])
    with caplog.at_level(logging.WARNING, logger="diel.worker"):
        again = serve(space, tmp_path / "s", {"trial": 0, "restore": restore_of(two, one)})
    assert again[-1]["metrics"]["resumed"] == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and two["path"] in warnings[0] and "damaged" in warnings[0]
    assert "step 1" in warnings[0]


def test_with_no_usable_checkpoint_the_trial_starts_from_scratch_with_a_warning(tmp_path, caplog):
    space = FakeSpace()
    saved = [r for r in serve(space, tmp_path / "s", {"trial": 0, "params": {"epochs": 1}})
             if r["kind"] == "checkpoint"][-1]
    os.unlink(saved["path"])
    with caplog.at_level(logging.WARNING, logger="diel.worker"):
        again = serve(space, tmp_path / "s", {"trial": 0, "restore": restore_of(saved)})
    assert again[-1]["metrics"]["resumed"] == -1 and again[-1]["metrics"]["total"] == 3 * SIZE
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and saved["path"] in warnings[0] and "from scratch" in warnings[0]


def info(folder: Path, restore: dict | None = None, **params) -> dict:
    return {"number": 0, "study": "s", "copy": 0, "device": None, "params": params,
            "restore": restore, "checkpoints": str(folder)}


@pytest.fixture
def isolated():
    runner = IsolatedRunner("checkpointing.py:counting", HERE, dict(os.environ), grace=1.0)
    yield runner
    runner.close()


def test_an_isolated_trial_checkpoints_in_its_child_and_resumes_from_memory(isolated, tmp_path):
    space = FakeSpace()
    link = ScriptedLink(lambda step, metrics: "pause" if step == 3 else False, space=space)
    outcome = isolated.run(info(tmp_path, epochs=5), link, None)
    saved = link.reports("checkpoint")
    assert outcome.status == "paused" and saved[-1]["step"] == 3   # reported before run() returns
    assert not any("ckpt" in str(tag) for tag in space.pending())   # no copy while it ran
    link.finish(paused=True)   # as the worker ends a paused trial: its copy is kept
    read(saved[-1]["path"], saved[-1]["checksum"])
    os.unlink(saved[-1]["path"])   # the copy in memory is all that is left
    again = isolated.run(info(tmp_path, restore_of(saved[-1]), epochs=4), ScriptedLink(space=space),
                         None)
    assert again.metrics["resumed"] == 3 and again.metrics["total"] == 4 * SIZE


def test_an_isolated_trial_asked_to_pause_ends_paused_with_its_checkpoint(isolated, tmp_path, caplog):
    link = ScriptedLink(lambda step, metrics: "pause" if step == 2 else False)
    outcome = isolated.run(info(tmp_path, epochs=5), link, None)
    assert outcome.status == "paused" and outcome.step == 2
    assert link.reports("checkpoint")[-1]["step"] == 2
    with caplog.at_level(logging.WARNING, logger="diel.worker"):   # the child's warning
        os.unlink(link.reports("checkpoint")[-1]["path"])          # reaches the rank's log
        again = isolated.run(info(tmp_path, restore_of(link.reports("checkpoint")[-1]), epochs=5),
                             ScriptedLink(), None)
    assert again.metrics["resumed"] == -1
    assert any("from scratch" in r.getMessage() for r in caplog.records)


PROGRAM = """\
import json, os, signal, sys, time
report = open(os.environ['DIEL_REPORT_FILE'], 'a', buffering=1)
folder = os.environ['DIEL_CHECKPOINT_DIR']
first = int(os.environ.get('DIEL_RESTORE_STEP', '0')) + 1
total = int(open(os.path.join(folder, 'total')).read()) if first > 1 else 0
pause = []
signal.signal(signal.SIGUSR1, lambda *_: pause.append(True))
last = int(sys.argv[1])
for step in range(first, last + 1):
    total += step
    report.write(json.dumps({'step': step, 'total': total}) + '\\n')
    os.makedirs(os.path.join(folder, 'sub'), exist_ok=True)
    open(os.path.join(folder, 'total'), 'w').write(str(total))
    open(os.path.join(folder, 'sub', 'big'), 'wb').write(bytes(range(256)) * 64)
    report.write(json.dumps({'checkpoint': step}) + '\\n')
    if step < last:   # the next step's files must wait until the worker has read these
        time.sleep(0.4)   # longer than the worker's look at the report file
    if pause:
        sys.exit(0)
json.dump({'total': total, 'first': first}, open(os.environ['DIEL_RESULT_FILE'], 'w'))
"""


def test_a_program_checkpoints_its_folder_pauses_on_sigusr1_and_resumes_with_its_files(tmp_path):
    (tmp_path / "count.py").write_text(PROGRAM)
    runner = ProgramRunner([sys.executable, "count.py", "{steps}"], tmp_path, dict(os.environ), 1.0)
    link = ScriptedLink(lambda step, metrics: "pause" if step == 2 else False,
                        folder=tmp_path / "s")
    outcome = runner.run(info(tmp_path / "s", steps=4), link, 60)
    link.finish(paused=True)
    assert outcome.status == "paused" and outcome.step == 2
    saved = link.reports("checkpoint")
    assert [r["step"] for r in saved] == [1, 2]
    state = read(saved[-1]["path"], saved[-1]["checksum"]).load()
    assert state == {"total": b"3", "sub/big": bytes(range(256)) * 64}
    again = runner.run(info(tmp_path / "s", restore_of(saved[-1], saved[0]), steps=4),
                       ScriptedLink(folder=tmp_path / "s"), 60)
    assert again.status == "ok" and again.metrics == {"total": 10, "first": 3}


def test_a_program_folder_changed_after_its_checkpoint_line_is_not_taken(tmp_path):
    (tmp_path / "a").write_bytes(b"1")
    as_of = os.stat(tmp_path / "a").st_mtime_ns
    assert folder_state(tmp_path, as_of) == {"a": b"1"}
    time.sleep(0.05)
    (tmp_path / "a").write_bytes(b"2")   # the next checkpoint, already being written
    with pytest.raises(FolderChanged, match="changed after"):
        folder_state(tmp_path, as_of)


@pytest.mark.mpi
def test_every_rank_of_a_copy_gets_what_rank_0_restores_and_rank_0_alone_checkpoints(tmp_path):
    done = run_mpi(2, [str(HERE / "two_rank_restore.py"), str(tmp_path)], timeout=60,
                   env={"PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-3000:]
    first, second = (json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in (0, 1))
    assert first["status"] == "ok" and first["saved"] == [3, 4]
    for rank in (first, second):
        assert rank["resumed"] == 2 and rank["total"] == 4 * SIZE and rank["epoch"] == 4


@pytest.fixture
def real_space():
    space = InProcSpace(n_servers=2, n_clients=1)
    yield space.clients[0]
    space.stop()


def test_the_copy_in_memory_goes_through_the_tuple_space_client_and_serves_a_resume(real_space, tmp_path):
    link = TrialLink(real_space, "s", 0, 7, time.perf_counter())
    old = write(take({"weights": np.zeros(SIZE)}), tmp_path / "step-1.ckpt", 1)
    new = write(take({"weights": np.full(SIZE, 2.0)}), tmp_path / "step-2.ckpt", 2)
    link.checkpointed(old)
    link.checkpointed(new)
    assert [r["step"] for r in real_space.tget_many(report_tag("s"), 10)] == [1, 2]
    assert link.memory_image(new.nbytes) is None   # none kept while the trial runs
    link.finish(paused=True)   # the newest is kept for the paused trial's resume
    os.unlink(new.path)
    restore = {"step": 2, "path": new.path, "nbytes": new.nbytes, "checksum": new.checksum,
               "older": []}
    step, snapshot = resume_point(restore, 7, link.memory_image, pytest.fail)
    assert step == 2 and (snapshot.load()["weights"] == 2.0).all()
    fd = link.memory_copy(new.nbytes)   # an isolated child's way: a memory file it maps
    try:
        mapped = mmap.mmap(fd, new.nbytes, access=mmap.ACCESS_COPY)
    finally:
        os.close(fd)
    assert (unpack(mapped, new.checksum, "copy").load()["weights"] == 2.0).all()
    assert link.memory_image(new.nbytes + 64) is None   # another checkpoint's size: none
    assert link.memory_copy(new.nbytes + 64) is None
    link.finish(paused=False)   # a trial that ended: its copy is dropped
    assert link.memory_image(new.nbytes) is None and link.memory_copy(new.nbytes) is None


def test_a_checkpoint_that_cannot_be_written_is_one_warning_and_the_trial_goes_on(tmp_path, caplog):
    (tmp_path / "taken").write_text("a file where the study's folder would be")
    with caplog.at_level(logging.WARNING, logger="diel.worker"):
        reports = serve(FakeSpace(), tmp_path / "taken", {"trial": 0, "params": {"epochs": 1}})
    assert [r["kind"] for r in reports] == ["start", "epoch", "result"]
    assert reports[-1]["status"] == "ok"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "not written" in warnings[0] and "taken" in warnings[0]


def test_a_program_that_ignores_the_pause_signal_is_ended_by_it_and_paused(tmp_path):
    (tmp_path / "loop.py").write_text(
        "import json, os, time\n"
        "report = open(os.environ['DIEL_REPORT_FILE'], 'a', buffering=1)\n"
        "for step in range(1, 1000):\n"
        "    report.write(json.dumps({'step': step, 'accuracy': 0.1}) + '\\n')\n"
        "    time.sleep(0.05)\n")
    runner = ProgramRunner([sys.executable, "loop.py"], tmp_path, dict(os.environ), 1.0)
    started = time.monotonic()
    outcome = runner.run(info(tmp_path / "s"), ScriptedLink(lambda step, metrics: "pause"), 60)
    assert outcome.status == "paused" and outcome.step >= 1
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("line", ['{"checkpoint": -1}', '{"checkpoint": 2, "accuracy": 0.5}',
                                  '{"checkpoint": "2"}'])
def test_a_malformed_checkpoint_line_is_malformed(tmp_path, line):
    (tmp_path / "reports.jsonl").write_text(line + "\n" + '{"checkpoint": 3}\n')
    reports = ReportFile(tmp_path / "reports.jsonl")
    assert reports.new_reports() == [(3, None)]
    assert "a checkpoint line is" in reports.bad_line


class CountingSpace(FakeSpace):
    """A fake space that counts the requests to its distributed store."""

    def __init__(self) -> None:
        super().__init__()
        self.store_requests = 0

    def dist_tget(self, tag, timeout=None, out=None):
        self.store_requests += 1
        return super().dist_tget(tag, timeout, out)


def test_only_a_resumed_trial_asks_the_space_to_drop_its_copy(tmp_path):
    space = CountingSpace()
    TrialLink(space, "s", 0, 1, time.perf_counter()).finish(paused=False)
    assert space.store_requests == 0   # a trial from scratch: no copy can be there
    space.dist_tput(checkpoint_tag("s", 2), np.arange(8, dtype=np.uint8))   # kept at its pause
    TrialLink(space, "s", 0, 2, time.perf_counter(), resumed=True).finish(paused=False)
    assert space.store_requests == 1
    assert not any("ckpt" in str(tag) for tag in space.pending())   # dropped
