"""Program trials: run the user's program once per trial, follow its progress, stop it.

The argv's ``{name}`` placeholders take the trial's parameters (and ``{result_file}``,
``{report_file}``, ``{trial}``). The program gets ``$DIEL_PARAMS`` (JSON),
``$DIEL_TRIAL``, ``$DIEL_STUDY``, ``$DIEL_RESULT_FILE`` and ``$DIEL_REPORT_FILE``. Each
line it appends to the report file, a JSON object such as ``{"step": 3, "accuracy":
0.91}``, is one epoch report; a prune order or the timeout ends the program (SIGTERM,
then SIGKILL after the grace period). At exit 0 it has written its final metrics (a JSON
object, or one number: the objective's value) to the result file.

The program leads a process group of its own (:mod:`diel.executive.process_groups`): when it is
stopped, when the rank is interrupted and when it exits, every process it started and
left running is ended with it. A report line or result file is read at most
:data:`~diel.limits.REPORT_BYTES` bytes at a time; a longer one is malformed.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping

from diel.executive import process_groups
from diel.limits import REPORT_BYTES
from diel.executive.placeholders import fill_placeholders
from diel.executive.stderr_tail import StderrTail
from diel.worker.outcome import TrialOutcome, death_reason, timed_out
from diel.worker.trial import Reporter, clean_metrics, metrics_of_return

__all__ = ["ProgramRunner", "ReportFile", "RESULT_ENV", "REPORT_ENV", "PARAMS_ENV"]

RESULT_ENV = "DIEL_RESULT_FILE"
REPORT_ENV = "DIEL_REPORT_FILE"
PARAMS_ENV = "DIEL_PARAMS"
POLL = 0.2   # seconds between looks at the report file while the program runs


class ReportFile:
    """Reads the complete lines a program has appended since the last look."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.bad_line: str | None = None   # the first malformed line, and why
        self._skipping = False   # inside a line too long to read: up to its end

    def new_reports(self) -> list[tuple[int, dict[str, Any]]]:
        """``(step, metrics)`` of each new line; the first malformed line is kept in
        ``bad_line``. Reads :data:`~diel.limits.REPORT_BYTES` at a time."""
        reports: list[tuple[int, dict[str, Any]]] = []
        while chunk := self._read():
            if self._skipping:   # the rest of a line too long to read
                end = chunk.find(b"\n") + 1
                self._skipping = end == 0
                self.offset += end or len(chunk)
                continue
            end = chunk.rfind(b"\n") + 1   # a line still being written waits for the next look
            if end == 0 and len(chunk) == REPORT_BYTES:
                self._malformed(chunk[:200].decode("utf-8", "replace"),
                                f"a line longer than {REPORT_BYTES} bytes")
                self._skipping = True
                self.offset += len(chunk)
                continue
            self.offset += end
            for line in chunk[:end].decode("utf-8", "replace").splitlines():
                if line.strip():
                    try:
                        reports.append(_parse_line(line))
                    except ValueError as e:
                        self._malformed(line, str(e))
            if len(chunk) < REPORT_BYTES:
                break
        return reports

    def _read(self) -> bytes:
        try:
            with open(self.path, "rb") as stream:
                stream.seek(self.offset)
                return stream.read(REPORT_BYTES)
        except OSError:
            return b""

    def _malformed(self, line: str, reason: str) -> None:
        if self.bad_line is None:
            self.bad_line = f"{line[:200]!r}: {reason}"


def _parse_line(line: str) -> tuple[int, dict[str, Any]]:
    try:
        values = json.loads(line)
    except ValueError:
        raise ValueError("not JSON") from None
    if not isinstance(values, dict):
        raise ValueError("expected a JSON object such as {\"step\": 1, \"accuracy\": 0.9}")
    step = values.pop("step", values.pop("epoch", None))
    if isinstance(step, bool) or not isinstance(step, int):
        raise ValueError("expected an integer \"step\"")
    try:
        return step, clean_metrics(values)
    except (TypeError, ValueError) as e:
        raise ValueError(str(e)) from None


class ProgramRunner:
    """Runs ``argv`` (placeholders unfilled) once per trial in folder ``cwd``."""

    def __init__(self, argv: list[str], cwd: Path, env: Mapping[str, str], grace: float) -> None:
        self.argv, self.cwd, self.env, self.grace = list(argv), cwd.resolve(), dict(env), grace

    def run(self, info: dict[str, Any], reporter: Reporter, timeout: float | None) -> TrialOutcome:
        """Run one trial (``info``: number, study, copy, params, device) to its outcome."""
        with tempfile.TemporaryDirectory(prefix="diel-trial-") as folder:
            result_file, report_file = Path(folder) / "result.json", Path(folder) / "reports.jsonl"
            report_file.touch()
            fields = {**info["params"], "result_file": str(result_file),
                      "report_file": str(report_file), "trial": info["number"]}
            try:
                argv = fill_placeholders(self.argv, fields)
            except ValueError as e:
                return TrialOutcome("failed", error=str(e))
            env = {**self.env, RESULT_ENV: str(result_file), REPORT_ENV: str(report_file),
                   PARAMS_ENV: json.dumps(info["params"]), "DIEL_TRIAL": str(info["number"]),
                   "DIEL_STUDY": info["study"]}
            try:
                process = process_groups.start(argv, env=env, cwd=str(self.cwd),
                                               stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
            except OSError as e:
                return TrialOutcome("failed", error=f"cannot run {argv[0]!r}: {e.strerror or e}")
            tail = StderrTail(process.stderr)
            try:
                return self._follow(process, tail, ReportFile(report_file), result_file,
                                    reporter, timeout)
            except BaseException:   # an interrupt (the job ends) or a failure of this rank
                process_groups.stop(process, self.grace)
                raise

    def close(self) -> None:
        """Nothing outlives a trial (for symmetry with the other runners)."""

    def _follow(self, process: subprocess.Popen, tail: StderrTail, reports: ReportFile,
                result_file: Path, reporter: Reporter, timeout: float | None) -> TrialOutcome:
        deadline = None if timeout is None else time.monotonic() + timeout
        last: tuple[int, dict[str, Any]] = (0, {})
        while True:
            try:
                code = process.wait(timeout=POLL)
            except subprocess.TimeoutExpired:
                code = None
            for step, metrics in reports.new_reports():
                last = (step, metrics)
                if reporter(step, metrics) and code is None:   # an exited program has no prune
                    self._end(process, tail)
                    return TrialOutcome("pruned", metrics, step=step)
            if code is not None:
                break
            if deadline is not None and time.monotonic() >= deadline:
                self._end(process, tail)
                return TrialOutcome("failed", last[1], error=timed_out(timeout or 0) + tail.text(note_silence=False),
                               step=last[0])
        self._end(process, tail)   # what it left running
        if code != 0:
            return TrialOutcome("failed", last[1], error=death_reason(code) + tail.text(), step=last[0])
        return _result(result_file, last, reports.bad_line)

    def _end(self, process: subprocess.Popen, tail: StderrTail) -> None:
        """End the program's group (SIGTERM, grace, SIGKILL) and read the rest of its stderr."""
        process_groups.stop(process, self.grace)
        tail.join()


def _result(path: Path, last: tuple[int, dict[str, Any]], bad_line: str | None) -> TrialOutcome:
    if bad_line is not None:
        return TrialOutcome("failed", last[1], step=last[0],
                       error=f"malformed line in ${REPORT_ENV}: {bad_line}")
    try:
        with open(path, "rb") as stream:
            data = stream.read(REPORT_BYTES + 1)
    except FileNotFoundError:
        return TrialOutcome("failed", last[1], step=last[0],
                       error=f"the program exited 0 but wrote no result file (${RESULT_ENV})")
    except OSError as e:
        return TrialOutcome("failed", last[1], step=last[0], error=f"unreadable result file: {e}")
    if len(data) > REPORT_BYTES:
        return TrialOutcome("failed", last[1], step=last[0],
                       error=f"result file larger than {REPORT_BYTES} bytes (${RESULT_ENV})")
    try:
        metrics, value = metrics_of_return(json.loads(data))
    except (ValueError, TypeError) as e:
        return TrialOutcome("failed", last[1], step=last[0], error=f"unreadable result file: {e}")
    return TrialOutcome("ok", {**last[1], **metrics}, value, step=last[0])
