"""The builtin ``trainer`` module: the ``worker`` running the trainer library's objective.

Its settings are the trainer's (``epochs``, ``batch_size``, ``dataset``, ...; see
:mod:`trainer.objective`), which every trial's params start from, plus the worker's own
``timeout``, ``grace``, ``isolate``, ``max_attempts``, ``study`` and ``command`` (an
executable trainer instead of the builtin network). Any other key is a mistake
(``epocs: 2`` would train with the default epochs) and fails validation, unless
``command`` is given: then the other keys are the program's placeholders.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from diel.checks import closest
from diel.errors import ConfigError
from diel.executive.config import ModuleSpec, Workflow
from diel.worker.settings import WORKER_KEYS, parse_settings

__all__ = ["main", "validate_settings", "check_searched_params"]

OWN_KEYS = tuple(key for key in WORKER_KEYS if key not in ("run", "params"))


def _split(settings: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the worker's settings, the trainer's fixed params)."""
    own = {k: v for k, v in settings.items() if k in OWN_KEYS}
    return own, {k: v for k, v in settings.items() if k not in OWN_KEYS}


def validate_settings(settings: dict, path: str, module: ModuleSpec | None = None,
                      workflow: Workflow | None = None) -> None:
    """Check the worker keys and the trainer's settings (ConfigError names the key).

    A key that is neither the worker's nor the trainer's (``epocs``) is refused with the
    closest of both as a hint, except with ``command``: then the other keys are the
    program's, filling its ``{placeholders}``.
    """
    from trainer.objective import SettingsError, validate_settings as check_trainer

    own, fixed = _split(settings)
    base = workflow.directory if workflow is not None else Path.cwd()
    parse_settings(own, path, base, module.size if module is not None else 1,
                   allowed=OWN_KEYS, function_required=False)
    try:
        check_trainer(fixed, path, also_known=OWN_KEYS, check_keys="command" not in own)
    except SettingsError as e:
        raise ConfigError(e.path, e.message) from None


def check_searched_params(names: list[str], path: str, settings: dict[str, Any]) -> None:
    """A search over the builtin trainer may only vary the trainer's settings (a typo
    such as ``learning_rat`` would be ignored by every trial); with ``command`` the
    names are the program's placeholders, so anything goes."""
    from trainer.objective import TRAINER_KEYS

    if "command" in settings:
        return
    for name in names:
        if name not in TRAINER_KEYS:
            hint = closest(name, TRAINER_KEYS)
            raise ConfigError(f"{path}.{name}", "the builtin trainer has no such setting, so "
                              "every trial would ignore it" + (f"; did you mean '{hint}'?"
                                                               if hint else ""))


def main(ctx: Any) -> None:
    """Serve the search: each trial trains the builtin network (or runs ``command``)."""
    from trainer.objective import objective
    # here: the search master imports this module for check_searched_params, not to run
    # trials (the worker's runtime was some 13 ms of its start)
    from diel.worker.module import run_worker

    path = f"modules.{ctx.name}.settings"
    own, fixed = _split(dict(ctx.config))
    dataset = fixed.get("dataset")
    if isinstance(dataset, dict) and isinstance(dataset.get("mnist"), str):
        fixed["dataset"] = {"mnist": str(Path(ctx.workflow_dir) / dataset["mnist"])}
    settings = parse_settings({**own, "params": fixed}, path, Path(ctx.workflow_dir), ctx.size,
                              allowed=(*OWN_KEYS, "params"), function_required=False)
    run_worker(ctx, settings, function=None if settings.command else objective)
