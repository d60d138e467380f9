"""Program trials: run the user's program once per trial, follow its progress, stop it.

The argv's ``{name}`` placeholders take the trial's parameters (and ``{result_file}``,
``{report_file}``, ``{trial}``). The program gets ``$DIEL_PARAMS`` (JSON),
``$DIEL_TRIAL``, ``$DIEL_STUDY``, ``$DIEL_RESULT_FILE`` and ``$DIEL_REPORT_FILE``. Each
line it appends to the report file, a JSON object such as ``{"step": 3, "accuracy":
0.91}``, is one epoch report; a prune order or the timeout ends the program (SIGTERM,
then SIGKILL after the grace period). At exit 0 it has written its final metrics (a JSON
object, or one number: the objective's value) to the result file.

Checkpoints (docs/workers.md, "Checkpoints"): ``$DIEL_CHECKPOINT_DIR`` is an empty
folder of the attempt's; the program writes its files there, then appends the line
``{"checkpoint": step}``, and the worker reads that folder's files as the checkpoint of
``step`` and writes it durably. A resumed trial's folder holds the files of the
checkpoint it resumes from, and ``$DIEL_RESTORE_STEP`` is its step. A pause order
reaches the program as SIGUSR1 (to its own process): it may checkpoint and exit; after
:data:`PAUSE_WAIT` seconds it is stopped. Either way the trial is ``paused``.

The program leads a process group of its own (:mod:`diel.executive.process_groups`): when it is
stopped, when the rank is interrupted and when it exits, every process it started and
left running is ended with it. A report line or result file is read at most
:data:`~diel.limits.REPORT_BYTES` bytes at a time; a longer one is malformed.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Mapping

from diel.checkpoints.files import os_reason
from diel.executive import process_groups
from diel.limits import LOG_TEXT_CHARS, REPORT_BYTES, clip
from diel.executive.placeholders import fill_placeholders
from diel.executive.stderr_tail import StderrTail
from diel.worker.folder_state import FolderChanged, folder_state, write_folder_state
from diel.worker.link import TrialLink
from diel.worker.outcome import TrialOutcome, death_reason, timed_out
from diel.worker.resume import resume_point
from diel.worker.trial import PAUSE, PRUNE, clean_metrics, metrics_of_return

__all__ = ["ProgramRunner", "ReportFile", "RESULT_ENV", "REPORT_ENV", "PARAMS_ENV",
           "CHECKPOINT_ENV", "RESTORE_STEP_ENV", "PAUSE_WAIT"]

log = logging.getLogger("diel.worker")

RESULT_ENV = "DIEL_RESULT_FILE"
REPORT_ENV = "DIEL_REPORT_FILE"
PARAMS_ENV = "DIEL_PARAMS"
CHECKPOINT_ENV = "DIEL_CHECKPOINT_DIR"
RESTORE_STEP_ENV = "DIEL_RESTORE_STEP"
POLL = 0.2         # seconds between looks at the report file while the program runs
PAUSE_WAIT = 60.0  # seconds a program asked to pause (SIGUSR1) has to checkpoint and exit


class ReportFile:
    """Reads the complete lines a program has appended since the last look."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.bad_line: str | None = None   # the first malformed line, and why
        self._skipping = False   # inside a line too long to read: up to its end

    def new_reports(self) -> list[tuple[int, dict[str, Any] | None]]:
        """``(step, metrics)`` of each new line, ``(step, None)`` for a checkpoint line;
        the first malformed line is kept in ``bad_line``. Reads
        :data:`~diel.limits.REPORT_BYTES` at a time."""
        reports: list[tuple[int, dict[str, Any] | None]] = []
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

    def fence(self) -> tuple[int, int] | None:
        """``(size, st_mtime_ns)`` of the report file now, to call before
        :meth:`new_reports`: when the last line those return ends at ``size``, it was
        written at that time (a program's checkpoint line: its files are as of then)."""
        try:
            status = os.stat(self.path)
        except OSError:
            return None
        return status.st_size, status.st_mtime_ns

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


def _parse_line(line: str) -> tuple[int, dict[str, Any] | None]:
    try:
        values = json.loads(line)
    except ValueError:
        raise ValueError("not JSON") from None
    if not isinstance(values, dict):
        raise ValueError("expected a JSON object such as {\"step\": 1, \"accuracy\": 0.9}")
    if "checkpoint" in values:
        step = values.pop("checkpoint")
        if values or isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError("a checkpoint line is {\"checkpoint\": <step, an integer >= 0>} "
                             "alone")
        return step, None
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

    def run(self, info: dict[str, Any], link: TrialLink, timeout: float | None) -> TrialOutcome:
        """Run one trial (``info``: :func:`~diel.worker.serve.serve_tasks`) to its outcome."""
        import tempfile   # here: every worker rank imports this module, few run programs

        with tempfile.TemporaryDirectory(prefix="diel-trial-") as folder:
            result_file, report_file = Path(folder) / "result.json", Path(folder) / "reports.jsonl"
            checkpoints = Path(folder) / "checkpoint"
            checkpoints.mkdir()
            report_file.touch()
            fields = {**info["params"], "result_file": str(result_file),
                      "report_file": str(report_file), "trial": info["number"]}
            try:
                argv = fill_placeholders(self.argv, fields)
            except ValueError as e:
                return TrialOutcome("failed", error=str(e))
            env = {**self.env, RESULT_ENV: str(result_file), REPORT_ENV: str(report_file),
                   PARAMS_ENV: json.dumps(info["params"]), "DIEL_TRIAL": str(info["number"]),
                   "DIEL_STUDY": info["study"], CHECKPOINT_ENV: str(checkpoints)}
            restored = _restore(info, link, checkpoints)
            if restored is not None:
                env[RESTORE_STEP_ENV] = str(restored)
            try:
                process = process_groups.start(argv, env=env, cwd=str(self.cwd),
                                               stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
            except OSError as e:
                return TrialOutcome("failed", error=f"cannot run {argv[0]!r}: {e.strerror or e}")
            tail = StderrTail(process.stderr)
            try:
                return self._follow(process, tail, ReportFile(report_file), result_file,
                                    link, timeout, _Saver(link, checkpoints, info["number"]))
            except BaseException:   # an interrupt (the job ends) or a failure of this rank
                process_groups.stop(process, self.grace)
                raise

    def close(self) -> None:
        """Nothing outlives a trial (for symmetry with the other runners)."""

    def _follow(self, process: subprocess.Popen, tail: StderrTail, reports: ReportFile,
                result_file: Path, link: TrialLink, timeout: float | None,
                saver: _Saver) -> TrialOutcome:
        deadline = None if timeout is None else time.monotonic() + timeout
        pausing: float | None = None   # when a program asked to pause is stopped
        last: tuple[int, dict[str, Any]] = (0, {})
        while True:
            try:
                code = process.wait(timeout=POLL)
            except subprocess.TimeoutExpired:
                code = None
            for step, metrics in saver.read(reports):
                last = (step, metrics)
                order = link.report(step, metrics)
                if code is not None or pausing is not None:   # an exited program has no order
                    continue
                if order == PRUNE:
                    self._end(process, tail)
                    return TrialOutcome("pruned", metrics, step=step)
                if order == PAUSE:
                    pausing = time.monotonic() + PAUSE_WAIT
                    _ask_to_pause(process)
            if code is not None:
                break
            if pausing is not None and time.monotonic() >= pausing:
                break
            if deadline is not None and time.monotonic() >= deadline and pausing is None:
                self._end(process, tail)
                return TrialOutcome("failed", last[1], error=timed_out(timeout or 0) + tail.text(note_silence=False),
                               step=last[0])
        self._end(process, tail)   # what it left running
        if pausing is not None:
            saver.read(reports)   # the checkpoint it may have written as it was stopped
            return TrialOutcome("paused", last[1], step=last[0])
        if code != 0:
            return TrialOutcome("failed", last[1], error=death_reason(code) + tail.text(), step=last[0])
        return _result(result_file, last, reports.bad_line)

    def _end(self, process: subprocess.Popen, tail: StderrTail) -> None:
        """End the program's group (SIGTERM, grace, SIGKILL) and read the rest of its stderr."""
        process_groups.stop(process, self.grace)
        tail.join()


class _Saver:
    """Takes the program's checkpoint folder as the checkpoint of a step (its line read)."""

    def __init__(self, link: TrialLink, folder: Path, number: int) -> None:
        self.link, self.folder, self.number = link, folder, number

    def read(self, reports: ReportFile) -> list[tuple[int, dict[str, Any]]]:
        """The new epoch reports of ``reports``; its new checkpoint lines are taken."""
        fence = reports.fence()
        lines = reports.new_reports()
        if fence is not None and reports.offset != fence[0]:
            fence = None   # lines came after the look: the last one's time is unknown
        epochs = []
        for index, (step, metrics) in enumerate(lines):
            if metrics is not None:
                epochs.append((step, metrics))
            else:
                self.save(step, fence if index == len(lines) - 1 else None)
        return epochs

    def save(self, step: int, fence: tuple[int, int] | None) -> None:
        """Take the folder as checkpoint ``step``, whose line ended the report file when
        it was ``fence`` (:meth:`ReportFile.fence`), or None when other lines followed it
        (its time is unknown, its files may be the next checkpoint's: it is skipped)."""
        if fence is None:
            log.info("trial %d: checkpoint of step %d skipped: the program wrote on before "
                     "its files were read", self.number, step)
            return
        try:
            state = folder_state(self.folder, fence[1])
        except FolderChanged as e:
            log.info("trial %d: checkpoint of step %d skipped: %s", self.number, step,
                     clip(str(e), LOG_TEXT_CHARS))
            return
        except OSError as e:   # a file the program removed or made unreadable meanwhile
            log.warning("trial %d: checkpoint of step %d not taken: %s", self.number, step,
                        clip(f"{e.filename}: {os_reason(e)}", LOG_TEXT_CHARS))
            return
        self.link.save(step, state)


def _restore(info: dict[str, Any], link: TrialLink, folder: Path) -> int | None:
    """Write the checkpoint the trial resumes from into its fresh ``folder``; its step,
    or None when it starts from scratch."""
    if info.get("restore") is None:
        return None
    found = resume_point(info["restore"], info["number"], link.memory_image, log.warning)
    if found is None:
        return None
    step, snapshot = found
    try:
        write_folder_state(snapshot.load(), folder)
    except (ValueError, OSError) as e:
        log.warning("%s", clip(f"trial {info['number']}: the checkpoint of step {step} cannot "
                               f"be restored into {folder}: {e}; the trial starts from scratch",
                               LOG_TEXT_CHARS))
        for path in sorted(folder.rglob("*"), reverse=True):   # files first, then folders
            path.rmdir() if path.is_dir() else path.unlink()
        return None
    return step


def _ask_to_pause(process: subprocess.Popen) -> None:
    """SIGUSR1 to the program itself (not its group: its helpers keep their default)."""
    try:
        process.send_signal(signal.SIGUSR1)
    except OSError:
        pass   # it has just exited: nothing to ask


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
