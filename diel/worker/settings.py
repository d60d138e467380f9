"""The worker module's settings (``modules.<name>.settings``), checked before any rank starts.

::

    run: train.py:objective      # a function of a trial: file.py:name or package.module:name
    command: [python, train.py, --lr, "{lr}"]   # or a program (argv list, never a shell)
    timeout: 900                 # seconds per trial; past it the trial is stopped, failed
    grace: 5                     # seconds between SIGTERM and SIGKILL when a trial is stopped
    isolate: true                # default true for size 1: the function runs in a child process
    max_attempts: 2              # job crashes a trial may be part of before it is failed
    params: {epochs: 5}          # fixed values every trial's params start from
    study: name                  # the search's study (default: the search's)

:func:`check_searched_program` is the search's check of a program trial's ``command``
placeholders, which needs the search space (see ``_check_searched`` in
:mod:`diel.search.settings`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from diel.checks import boolean, is_number, no_unknown_keys, non_empty_text, positive_number, \
    unknown_key_message, whole_number
from diel.errors import ConfigError
from diel.executive.placeholders import check_placeholders
from diel.worker.loading import check_run_spec

__all__ = ["WorkerSettings", "parse_settings", "unknown_key_message", "check_searched_program",
           "WORKER_KEYS", "PROGRAM_FIELDS", "DEFAULT_GRACE", "DEFAULT_MAX_ATTEMPTS"]

WORKER_KEYS = ("run", "command", "timeout", "grace", "isolate", "max_attempts", "params", "study")
PROGRAM_FIELDS = ("result_file", "report_file", "trial")   # placeholders besides the params
DEFAULT_GRACE = 5.0
DEFAULT_MAX_ATTEMPTS = 2
GOT = ", got"   # this file's messages read "expected ..., got ..." (diel.checks)


@dataclass(frozen=True)
class WorkerSettings:
    """Parsed worker settings; exactly one of ``run`` and ``command`` is set."""

    run: str | None = None
    command: list[str] | None = None
    timeout: float | None = None
    grace: float = DEFAULT_GRACE
    isolate: bool | None = None        # None: decided by the copy's size
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    params: dict[str, Any] = field(default_factory=dict)
    study: str | None = None

    def isolated(self, size: int) -> bool:
        """Whether a function trial runs in a child process for copies of ``size`` ranks."""
        return size == 1 if self.isolate is None else self.isolate


def _seconds(settings: Mapping[str, Any], key: str, path: str, default: float | None) -> float | None:
    value = settings.get(key, default)
    if value is None:
        return None
    return float(positive_number(value, f"{path}.{key}", "a positive number of seconds", got=GOT))


def parse_settings(settings: Mapping[str, Any] | None, path: str, base: Path,
                   size: int = 1, allowed: tuple[str, ...] = WORKER_KEYS,
                   function_required: bool = True) -> WorkerSettings:
    """Check ``settings`` at key path ``path`` (relative files resolve against ``base``).

    ``allowed`` lists the keys accepted (a typo is an error naming it); ``size`` is the
    copy's ranks, since isolation and programs need one rank per trial.
    ``function_required=False`` lets a caller that brings its own function omit ``run``.
    """
    settings = dict(settings or {})
    no_unknown_keys(settings, allowed, path)
    run, command = settings.get("run"), settings.get("command")
    if run is not None and command is not None:
        raise ConfigError(path, "give either run (a function) or command (a program), not both")
    if run is None and command is None and function_required:
        raise ConfigError(path, "a worker needs run: file.py:function (or package.module:"
                                "function) or command: [program, args...]")
    if run is not None:
        try:
            check_run_spec(run, base)
        except ValueError as e:
            raise ConfigError(f"{path}.run", str(e)) from None
    if command is not None:
        if not isinstance(command, list) or not command or not all(
                isinstance(item, str) or is_number(item) for item in command):
            raise ConfigError(f"{path}.command", "expected a non-empty list: the program and its "
                                                 "arguments ({name} for a parameter)")
        if size != 1:
            raise ConfigError(f"{path}.command", f"a program trial runs once per trial, so the "
                                                 f"module needs size: 1 (it has {size}); a "
                                                 "program that needs MPI can start its own mpiexec")
        from diel.executive.command import find_program   # a program worker's only (shutil)

        command = find_program([str(item) for item in command], base, f"{path}.command[0]")
    isolate = settings.get("isolate")
    if isolate is not None:
        boolean(isolate, f"{path}.isolate", got=GOT)
    if isolate and size != 1:
        raise ConfigError(f"{path}.isolate", f"isolate: true needs size: 1 (this module has "
                                             f"size: {size}); a multi-rank trial runs in its ranks")
    attempts = whole_number(settings.get("max_attempts", DEFAULT_MAX_ATTEMPTS),
                            f"{path}.max_attempts", 1, "a whole number >= 1", got=GOT)
    params = settings.get("params", {})
    if not isinstance(params, Mapping) or not all(isinstance(k, str) for k in params):
        raise ConfigError(f"{path}.params", f"expected a mapping of fixed parameter values, "
                                            f"got {params!r}")
    study = settings.get("study")
    if study is not None:
        non_empty_text(study, f"{path}.study", "the search's study name", got=GOT)
    return WorkerSettings(run=run, command=command,
                          timeout=_seconds(settings, "timeout", path, None),
                          grace=_seconds(settings, "grace", path, DEFAULT_GRACE) or DEFAULT_GRACE,
                          isolate=isolate, max_attempts=attempts, params=dict(params), study=study)


def check_searched_program(settings: Mapping[str, Any], searched: Sequence[str],
                           path: str) -> None:
    """Raise :class:`ConfigError` when the ``command`` of the worker settings ``settings``
    (at key path ``path``) has a placeholder that no trial fills: each trial gives the
    ``searched`` names, the fixed params (the keys of ``params``, and every key beside
    the worker's own, as the builtin trainer's settings are) and :data:`PROGRAM_FIELDS`.
    Without a command, or with one that is not a list, there is nothing to check here
    (:func:`parse_settings` reports a malformed one)."""
    command = settings.get("command")
    if not isinstance(command, list):
        return
    params = settings.get("params")
    fixed = [*(params if isinstance(params, Mapping) else ()),
             *(key for key in settings if key not in WORKER_KEYS)]
    check_placeholders(command, [*searched, *fixed, *PROGRAM_FIELDS], f"{path}.command",
                       "the searched and fixed parameters, and what diel gives each trial")
