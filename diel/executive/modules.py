"""Finding what a module runs: a ``pkg.mod:func``, a builtin, or a program.

Builtin modules (``tuplespace``, ``search``, ``trainer``) are entry points in the group
``diel.modules``, so any installed package can add its own. A function's Python module
may define ``validate_settings(settings, path)`` raising ``ValueError`` (with ``path`` and
``message`` attributes to name a key); it is called before anything starts so that
mistakes in a module's ``settings`` are reported like any other config error. A check
that also needs the module's layout or the workflow's folder declares the keyword
parameters ``module`` (its :class:`~diel.executive.config.ModuleSpec`) and/or ``workflow``.
``diel validate`` checks every module; each rank of ``diel run`` checks (and imports)
only the module it runs. A module may also define ``prepare(settings, module, workflow,
node)``, called on its ranks as soon as they have checked it, to start what takes time
before the job's own set-up (:func:`prepare_module`).
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from diel.errors import ConfigError
from diel.executive.config import ModuleSpec, Workflow
from diel.executive.paths import shown_path
from diel.plugins import exception_line, load_plugin, plugin_names

if TYPE_CHECKING:
    from diel.executive.node import NodeShare

__all__ = ["ENTRY_POINT_GROUP", "builtin_names", "resolve_function", "resolve_program",
           "check_workflow", "prepare_module", "search_path_for"]

ENTRY_POINT_GROUP = "diel.modules"
SPACE_BUILTIN = "tuplespace"


def builtin_names() -> list[str]:
    """Names of the builtin modules installed (entry points of ``diel.modules``)."""
    return plugin_names(ENTRY_POINT_GROUP)


def search_path_for(workflow: Workflow) -> None:
    """Let ``function:`` name modules in the current folder or beside the workflow file."""
    for folder in (str(workflow.directory), os.getcwd()):
        if folder not in sys.path:
            sys.path.insert(0, folder)


def resolve_function(module: ModuleSpec) -> Callable[[Any], Any]:
    """The callable a function module runs; ConfigError when it cannot be found."""
    path = f"modules.{module.name}.function"
    target = module.function or ""
    shown = shown_path(target)   # a name of any length or content, quoted on one line
    if ":" not in target:
        function = load_plugin(ENTRY_POINT_GROUP, target, path, "builtin", lambda names: (
            f"'{shown}' is not a builtin module (installed builtins: "
            f"{', '.join(names) or 'none'}); name a function as 'package.module:function'"))
    else:
        module_name, _, attribute = target.partition(":")
        if not module_name or not attribute:
            raise ConfigError(path, f"expected 'package.module:function', got '{shown}'")
        try:
            python_module = importlib.import_module(module_name)
        except Exception as exc:
            raise ConfigError(path, f"cannot import '{shown_path(module_name)}': "
                                    f"{exception_line(exc)}") from None
        function = python_module
        for part in attribute.split("."):
            function = getattr(function, part, None)
            if function is None:
                raise ConfigError(path, f"module '{shown_path(module_name)}' has no attribute "
                                        f"'{shown_path(attribute)}'")
    if not callable(function):
        raise ConfigError(path, f"'{shown}' is not callable; expected a function main(ctx)")
    return function


def resolve_program(module: ModuleSpec, workflow_dir: Path) -> list[str]:
    """The executable module's argv with its program found (:func:`diel.executive.command.find_program`:
    a leading ``python`` is this Python, relative programs beside the workflow file, then
    PATH). The program code is imported here, as only a rank that runs one needs it."""
    from diel.executive.command import find_program

    return find_program(list(module.command or ()), workflow_dir,
                        f"modules.{module.name}.command[0]")


def check_workflow(workflow: Workflow, running: str | None = None) -> None:
    """Resolve the modules and validate their settings; the first problem raises.

    ``running`` None (``diel validate``): every module. Else the name of the module this
    rank of ``diel run`` runs: only that module's function is imported and its settings
    validated here, as every rank of the job checks its own module and the job gathers
    their problems (:func:`diel.cli.load_checked`); so a rank imports only what it runs
    (a worker rank never the search master nor the results database). The checks of the
    workflow's shape (one tuplespace module, a service) are made on every rank.
    """
    search_path_for(workflow)
    space_modules = [m.name for m in workflow.modules if m.function == SPACE_BUILTIN]
    if len(space_modules) > 1:
        raise ConfigError(f"modules.{space_modules[1]}.function",
                          f"only one tuplespace module per workflow (already '{space_modules[0]}')")
    for module in workflow.modules:
        if running is not None and module.name != running:
            continue
        if module.command is not None:
            resolve_program(module, workflow.directory)
            continue
        function = resolve_function(module)
        validate = getattr(sys.modules.get(function.__module__), "validate_settings", None)
        if callable(validate):
            _validate_settings(validate, module, workflow)
    if space_modules and space_modules[0] not in workflow.services:
        raise ConfigError(f"modules.{space_modules[0]}",
                          "a tuplespace module must be listed under 'services' (it serves "
                          "for the whole workflow)")


def prepare_module(workflow: Workflow, running: str, node: NodeShare) -> None:
    """Let module ``running`` (checked: :func:`check_workflow`) start, on this rank, what
    takes time, as soon as the rank knows it runs it: its Python module's ``prepare(
    settings, module, workflow, node)``, if it defines one (the builtin ``worker`` starts
    its isolated trial process there, overlapping the job's set-up; the search master
    imports its database's modules). For diel's builtin modules and where the launcher
    tells the rank its place, this is before MPI starts (:func:`diel.cli.cmd_run`): a
    builtin's ``prepare`` needs no MPI. A start-up optimization: a ``prepare`` that fails
    is logged, and the module starts as usual."""
    module = workflow.module(running)
    if module.command is not None:
        return
    function = resolve_function(module)   # imported already, by the check
    prepare = getattr(sys.modules.get(function.__module__), "prepare", None)
    if not callable(prepare):
        return
    try:
        prepare(dict(module.settings), module, workflow, node)
    except Exception as exc:  # noqa: BLE001 - the module starts as usual without it
        logging.getLogger("diel.executive").warning(
            "module '%s': prepare failed, started as usual: %s", running, exception_line(exc))


def _validate_settings(validate: Callable[..., None], module: ModuleSpec,
                       workflow: Workflow) -> None:
    """Run a module's own check; a ValueError it raises becomes a ConfigError.

    Modules outside diel raise any ValueError; one with ``path`` and ``message``
    attributes names its key, else the module's ``settings`` are named. ``module`` and
    ``workflow`` are passed to a check that declares them.
    """
    path = f"modules.{module.name}.settings"
    accepted = inspect.signature(validate).parameters
    extra = {name: value for name, value in (("module", module), ("workflow", workflow))
             if name in accepted}
    try:
        validate(dict(module.settings), path, **extra)
    except ConfigError:
        raise
    except ValueError as exc:
        raise ConfigError(getattr(exc, "path", path), getattr(exc, "message", str(exc))) from None
