"""Everything a trial prints or returns is bounded on the worker's side: stderr tails,
error texts, metric names and strings, program report lines and result files."""

from __future__ import annotations

import io
import json
import os
import re
import sys
import time
from pathlib import Path

import pytest

from diel.limits import (ERROR_CHARS, METRIC_NAME_CHARS, METRIC_TEXT_CHARS, METRICS_PER_REPORT,
                         REPORT_BYTES, STDERR_LINE_CHARS, STDERR_LINES, clip)
from diel.executive.stderr_tail import StderrTail
from diel.worker.isolated import IsolatedRunner
from diel.worker.outcome import result_report
from diel.worker.program import ProgramRunner, ReportFile
from diel.worker.trial import clean_metrics
from tests.helpers.links import ScriptedLink

HERE = Path(__file__).resolve().parent
BIG = 20_000_000   # characters of one line with no line end


def info(number: int = 0, **params) -> dict:
    return {"number": number, "study": "s", "copy": 0, "device": None, "params": params}


never = ScriptedLink()   # a master that never stops a trial


def test_clip_counts_what_a_reader_dropped_before():
    text = "a" * 600 + "b" * 600
    clipped = clip(text, 1000, cut=5000)
    mark = re.search(r" \[\.\.\. (\d+) characters cut \.\.\.\] ", clipped)
    assert len(clipped) == 1000 and int(mark[1]) == 1200 + 5000 - (1000 - len(mark[0]))
    assert clipped.startswith("a") and clipped.endswith("b")
    assert clip("short", 1000) == "short"


# -- the stderr tail ----------------------------------------------------------------------

class Pipe:
    """A pipe whose read end a StderrTail follows, and whose write end the test writes;
    what the tail passes through is kept in ``passed`` (made in the test itself: pytest
    sets its own sys.stderr before each test)."""

    def __init__(self, monkeypatch) -> None:
        self.passed = io.BytesIO()
        monkeypatch.setattr(sys, "stderr", io.TextIOWrapper(self.passed))
        read, self.write_fd = os.pipe()
        self.tail = StderrTail(os.fdopen(read, "rb", buffering=0))

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.write_fd, view):]

    def close(self) -> list[str]:
        os.close(self.write_fd)
        self.tail.join(10)
        return self.tail.lines()


def test_a_huge_line_without_line_end_is_kept_bounded_and_passed_through_whole(monkeypatch):
    pipe = Pipe(monkeypatch)
    data = b"start " + b"x" * BIG + b" end"
    pipe.write(data)
    lines = pipe.close()
    assert len(lines) == 1 and len(lines[0]) == STDERR_LINE_CHARS
    assert lines[0].startswith("start x") and lines[0].endswith("x end")
    mark = re.search(r" \[\.\.\. (\d+) characters cut \.\.\.\] ", lines[0])
    assert int(mark[1]) + len(lines[0]) - len(mark[0]) == len(data)   # it counts what it cut
    assert pipe.passed.getvalue() == data


def test_carriage_returns_end_lines_and_a_progress_bar_is_one_line(monkeypatch):
    pipe = Pipe(monkeypatch)
    pipe.write(b"first\n" + b"".join(b"\r %3d%%|" % p for p in range(101)) + b"\n"
               + b"windows line\r")
    pipe.write(b"\nlast words")
    assert pipe.close() == ["first", " 100%|", "windows line", "last words"]


def test_only_the_last_lines_are_kept(monkeypatch):
    pipe = Pipe(monkeypatch)
    pipe.write(b"".join(b"line %d\n" % n for n in range(1000)))
    assert pipe.close() == [f"line {n}" for n in range(1000 - STDERR_LINES, 1000)]


def test_clear_forgets_what_the_pipe_holds_and_an_unfinished_line(monkeypatch):
    pipe = Pipe(monkeypatch)
    for n in range(50):   # the reader thread has seldom read the first write when clear() runs
        pipe.write(b"left unfinished %d" % n)
        pipe.tail.clear()
        pipe.write(b"next trial %d\n" % n)
        assert wait_for(lambda: pipe.tail.lines() == [f"next trial {n}"]), pipe.tail.lines()
        pipe.tail.clear()
    assert pipe.close() == []


def wait_for(condition, seconds: float = 5) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


# -- in the isolated child and in a program -----------------------------------------------

@pytest.fixture
def misbehaving():
    runner = IsolatedRunner("behaviours.py:misbehave", HERE, dict(os.environ), grace=1.0)
    yield runner
    runner.close()


def bounded(error: str) -> None:
    assert len(error) <= ERROR_CHARS
    assert "characters cut ...]" in error


def test_a_crashing_function_trial_that_printed_a_huge_line_stores_a_bounded_error(misbehaving):
    outcome = misbehaving.run(info(mode="big-line"), never, None)
    assert outcome.status == "failed"
    assert outcome.error.startswith("the trial's process exited with status 3")
    assert outcome.error.endswith("x the end of the big line")
    bounded(outcome.error)
    assert len(result_report(0, 0, outcome, 0.0)["error"]) <= ERROR_CHARS


def test_a_crashing_program_that_printed_a_huge_line_stores_a_bounded_error():
    program = [sys.executable, "-c",
               f"import sys; sys.stderr.write('x' * {BIG} + ' the end'); sys.exit(3)"]
    outcome = ProgramRunner(program, HERE, dict(os.environ), 1.0).run(info(), never, 60)
    assert outcome.status == "failed" and outcome.error.startswith("the trial's process exited")
    assert outcome.error.endswith("x the end")
    bounded(outcome.error)


def test_a_line_one_trial_left_unfinished_never_reaches_the_next_ones_error(misbehaving):
    assert misbehaving.run(info(mode="unfinished"), never, None).status == "ok"
    outcome = misbehaving.run(info(mode="last-words"), never, None)
    assert outcome.status == "failed"
    assert outcome.error.endswith("last lines of its stderr:\n    last words of the second trial")


def test_a_huge_exception_message_is_clipped(misbehaving):
    outcome = misbehaving.run(info(mode="long-error"), never, None)
    assert outcome.error.startswith("ValueError: yyy")
    assert re.search(r"y \(at behaviours.py:\d+\)$", outcome.error)
    bounded(outcome.error)


# -- metrics, report lines, result files --------------------------------------------------

def test_metric_names_and_strings_are_clipped_and_their_number_bounded():
    clean = clean_metrics({"n" * 10_000: "v" * 10_000_000})
    [(name, value)] = clean.items()
    assert len(name) == METRIC_NAME_CHARS and len(value) == METRIC_TEXT_CHARS
    assert len(clean_metrics({f"m{i}": i for i in range(METRICS_PER_REPORT)})) == METRICS_PER_REPORT
    with pytest.raises(ValueError, match=f"{METRICS_PER_REPORT + 1} metrics in one report; "
                                         f"at most {METRICS_PER_REPORT}"):
        clean_metrics({f"m{i}": i for i in range(METRICS_PER_REPORT + 1)})


def test_a_report_line_longer_than_the_limit_is_malformed_and_the_next_lines_are_read(tmp_path):
    path = tmp_path / "reports.jsonl"
    path.write_text('{"step": 1, "a": 1}\n' + '{"step": 2, "a": "' + "z" * (3 * REPORT_BYTES))
    reports = ReportFile(path)
    assert reports.new_reports() == [(1, {"a": 1})]
    assert reports.bad_line.endswith(f"a line longer than {REPORT_BYTES} bytes")
    assert len(reports.bad_line) < 300
    with open(path, "a") as stream:
        stream.write('"}\n{"step": 3, "a": 3}\n')
    assert reports.new_reports() == [(3, {"a": 3})]
    many = json.dumps({"step": 4, **{f"m{i}": i for i in range(METRICS_PER_REPORT + 1)}})
    with open(path, "a") as stream:
        stream.write(many + "\n" + "bad\n" * 1000)
    assert reports.new_reports() == []
    assert reports.bad_line.endswith(f"a line longer than {REPORT_BYTES} bytes")   # the first


def test_many_report_lines_are_all_read(tmp_path):
    path = tmp_path / "reports.jsonl"
    lines = 2 * REPORT_BYTES // 200   # lines of about 200 bytes: two reads' worth
    path.write_text("".join(json.dumps({"step": n, "a": "x" * 180}) + "\n" for n in range(lines)))
    assert [step for step, _ in ReportFile(path).new_reports()] == list(range(lines))


@pytest.mark.parametrize("body, reason", [
    (f"open(os.environ['DIEL_RESULT_FILE'], 'w').write('1' * {REPORT_BYTES + 1})",
     f"result file larger than {REPORT_BYTES} bytes"),
    ("open(os.environ['DIEL_REPORT_FILE'], 'w').write(json.dumps({'step': 1, **{str(i): i for i "
     f"in range({METRICS_PER_REPORT + 1})}}}}) + '\\n')\n"
     "open(os.environ['DIEL_RESULT_FILE'], 'w').write('1')",
     "malformed line in $DIEL_REPORT_FILE: '{\"step\": 1, \"0\": 0, "),
])
def test_oversized_program_output_is_a_bounded_failure(tmp_path, body, reason):
    (tmp_path / "train.py").write_text(f"import json, os\n{body}\n")
    outcome = ProgramRunner([sys.executable, "train.py"], tmp_path, dict(os.environ), 1.0).run(
        info(), never, 60)
    assert outcome.status == "failed" and reason in outcome.error, outcome.error
    assert len(outcome.error) <= ERROR_CHARS
