"""The worker side of the search protocol (docs/contracts.md), for trainer modules.

The master's half lives in :mod:`diel.search`; the two meet only through the tuple
space, with the tags below (the wire contract), so this package needs nothing of diel.

:func:`serve_tasks` runs on a worker copy's rank 0: it takes tasks until the master's
``None``, runs each with the caller's ``run_trial`` and puts the epoch reports and the
result. :func:`run_command_trial` runs an external training program for one trial.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

from trainer.errors import TrainerError

__all__ = ["serve_tasks", "run_command_trial", "fill_argv", "TrialFailed", "TrialPruned",
           "ReportEpoch", "RESULT_ENV", "PARAMS_ENV"]

RESULT_ENV = "DIEL_RESULT_FILE"
PARAMS_ENV = "DIEL_PARAMS"
STDERR_LINES = 20
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([A-Za-z_]\w*)\}|[{}]")
_RESULT_KEYS = ("time", "accuracy", "loss")

ReportEpoch = Callable[[int, Mapping[str, Any]], bool]


def task_tag(study: str) -> str:
    """Where the master puts tasks (and one ``None`` per worker copy at the end)."""
    return f"{study}/task"


def report_tag(study: str) -> str:
    """Where workers put their epoch and result reports."""
    return f"{study}/report"


def prune_tag(study: str, trial: int) -> str:
    """Where the master puts ``True`` to stop ``trial`` early."""
    return f"{study}/prune/{trial}"


class TrialFailed(TrainerError, RuntimeError):
    """A trial could not produce a result; the message becomes its error text."""


class TrialPruned(TrainerError):
    """Raised by a ``run_trial`` that stops because ``report_epoch`` returned True
    (returning normally after that works too)."""


class WorkerSpace(Protocol):
    """The part of the tuple-space client a worker uses."""

    def tput(self, tag: str, value: Any) -> None: ...
    def tget(self, tag: str, timeout: float | None = None) -> Any: ...
    def try_tget(self, tag: str) -> Any: ...


def serve_tasks(space: WorkerSpace, study: str, copy: int,
                run_trial: Callable[[dict[str, Any], ReportEpoch], Mapping[str, Any]]) -> int:
    """Serve tasks of ``study`` until the master's ``None``; return how many were run.

    ``run_trial(params, report_epoch)`` trains one trial and returns its metrics
    (``accuracy``, ``loss``, ``time`` and any others; ``time`` defaults to the wall time).
    It calls ``report_epoch(epoch, metrics)`` after each epoch; that puts the epoch report
    and returns True when the master ordered the trial stopped — ``run_trial`` should then
    return (or raise :class:`TrialPruned`) and the trial is reported ``pruned``. Any other
    exception is reported as a ``failed`` trial with its text and the search goes on.
    """
    served = 0
    while (task := space.tget(task_tag(study))) is not None:
        space.tput(report_tag(study), _run_one(space, study, copy, task, run_trial))
        served += 1
    return served


def _run_one(space: WorkerSpace, study: str, copy: int, task: Mapping[str, Any],
             run_trial: Callable[[dict[str, Any], ReportEpoch], Mapping[str, Any]]) -> dict:
    trial = task["trial"]
    state = {"epoch": 0, "pruned": False, "metrics": {}}
    started = time.perf_counter()

    def report_epoch(epoch: int, metrics: Mapping[str, Any]) -> bool:
        metrics = {"time": time.perf_counter() - started, **metrics}
        state["epoch"], state["metrics"] = epoch, metrics
        space.tput(report_tag(study), {"kind": "epoch", "trial": trial, "epoch": epoch,
                                       "metrics": metrics, "worker": copy})
        if space.try_tget(prune_tag(study, trial)) is True:
            state["pruned"] = True
        return bool(state["pruned"])

    result: dict[str, Any] = {"kind": "result", "trial": trial, "worker": copy, "error": None}
    try:
        metrics = dict(run_trial(dict(task["params"]), report_epoch) or {})
        status = "pruned" if state["pruned"] else "ok"
    except TrialPruned:
        metrics, status = dict(state["metrics"]), "pruned"
    except Exception as e:  # the trial failed; the worker goes on with the next task
        metrics, status = dict(state["metrics"]), "failed"
        result["error"] = _error_text(e)
    metrics.setdefault("time", time.perf_counter() - started)
    result.update(status=status, epoch=int(metrics.pop("epoch", state["epoch"])),
                  **{k: _json_number(metrics.pop(k, None)) for k in _RESULT_KEYS},
                  metrics=metrics)
    return result


def _json_number(value: Any) -> Any:
    """Numbers as plain floats (NumPy scalars included); other values as they are."""
    try:
        return float(value) if value is not None and not isinstance(value, str) else value
    except (TypeError, ValueError):
        return value


def _error_text(error: BaseException) -> str:
    """``Type: message`` plus the innermost frame, for the trials table."""
    if isinstance(error, TrialFailed):
        return str(error)
    frames = traceback.extract_tb(error.__traceback__)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return f"{type(error).__name__}: {error}{where}"


def fill_argv(argv_template: Sequence[str], values: Mapping[str, Any]) -> list[str]:
    """Fill ``{name}`` placeholders in each argument (``{{``/``}}`` for literal braces).

    Only plain names are replaced (no attribute or index access); an unknown name or a
    stray brace raises :class:`ValueError`.
    """
    def fill(arg: str) -> str:
        def replace(match: re.Match) -> str:
            token, name = match.group(0), match.group(1)
            if token in ("{{", "}}"):
                return token[0]
            if name is None:
                raise ValueError(f"stray brace in argument {arg!r}; write {{{{ or }}}} for "
                                 "a literal brace")
            if name not in values:
                raise ValueError(f"unknown placeholder {{{name}}} in argument {arg!r}; "
                                 f"known: {', '.join(sorted(values))}")
            return str(values[name])
        return _PLACEHOLDER.sub(replace, arg)
    return [fill(str(arg)) for arg in argv_template]


def run_command_trial(argv_template: list[str], params: Mapping[str, Any],
                      timeout: float | None = None, env: Mapping[str, str] | None = None,
                      cwd: str | Path | None = None) -> dict[str, Any]:
    """Run a training program for one trial and return the metrics it wrote.

    ``{name}`` placeholders in ``argv_template`` take the trial's parameters, and
    ``{result_file}`` a fresh JSON path that is also in ``$DIEL_RESULT_FILE``; the
    parameters are in ``$DIEL_PARAMS`` as JSON. The program (run without a shell) writes
    a JSON object of metrics to that file. Raises :class:`TrialFailed` on a non-zero exit
    (with the last stderr lines), a timeout or a missing or malformed result file.
    """
    with tempfile.TemporaryDirectory(prefix="diel-trial-") as tmp:
        result_file = Path(tmp) / "result.json"
        try:
            argv = fill_argv(argv_template, {**params, "result_file": str(result_file)})
        except ValueError as e:
            raise TrialFailed(str(e)) from e
        full_env = {**os.environ, **(env or {}), RESULT_ENV: str(result_file),
                    PARAMS_ENV: json.dumps(dict(params))}
        started = time.perf_counter()
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                                  env=full_env, cwd=cwd, check=False)
        except subprocess.TimeoutExpired as e:
            raise TrialFailed(f"timed out after {timeout:g} s: {' '.join(argv)}") from e
        except OSError as e:
            raise TrialFailed(f"cannot run {argv[0]!r}: {e}") from e
        elapsed = time.perf_counter() - started
        if done.returncode != 0:
            tail = "\n".join(done.stderr.strip().splitlines()[-STDERR_LINES:])
            raise TrialFailed(f"exit status {done.returncode}" + (f": {tail}" if tail else ""))
        return _read_result(result_file, elapsed)


def _read_result(path: Path, elapsed: float) -> dict[str, Any]:
    if not path.is_file():
        raise TrialFailed(f"the program exited 0 but wrote no result file (${RESULT_ENV})")
    try:
        metrics = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise TrialFailed(f"unreadable result file: {e}") from e
    if not isinstance(metrics, dict):
        raise TrialFailed(f"the result file must hold a JSON object, got {type(metrics).__name__}")
    metrics.setdefault("time", elapsed)
    return metrics
