"""Reading and validating a workflow YAML file, without MPI.

A workflow names its modules (a Python function, a builtin module or an executable),
how many ranks each copy of a module has and how many copies run, which modules are
long-lived services, and the groups of modules that run together as a DAG. Every
mistake is found here, before any module starts, and reported as a
:class:`~diel.errors.ConfigError` naming the file, the key path and what was expected.
The file is read as YAML 1.2 (``1e-3`` is a number, ``yes`` a string), a key given
twice in one mapping is refused, and so are files over :data:`MAX_WORKFLOW_BYTES` and
aliases that would expand past a bound (:mod:`diel.executive.yaml12`).

Example::

    modules:
      space:    {function: tuplespace, size: 1}
      producer: {function: mypkg.produce:main}
      consumer: {function: mypkg.consume:main, copies: 2}
    services: [space]
    groups:
      exchange: {modules: [producer, consumer], iterations: 3}
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from diel.checks import closest, did_you_mean, is_number, mapping, no_unknown_keys, \
    non_empty_text, positive_number, whole_number
from diel.errors import ConfigError
from diel.executive.paths import os_reason, shown_path
from diel.executive.placeholders import check_placeholders
from diel.executive.yaml12 import DuplicateKeyError, YamlLimitError, load_yaml

__all__ = ["ModuleSpec", "GroupSpec", "Workflow", "load_workflow", "parse_workflow",
           "load_yaml", "DuplicateKeyError", "ConfigWarning", "DEFAULT_GROUP",
           "MAX_WORKFLOW_BYTES"]

TOP_KEYS = ("name", "modules", "services", "groups")
MODULE_KEYS = ("function", "command", "size", "copies", "settings", "timeout")
GROUP_KEYS = ("modules", "after", "iterations")
COMMAND_FIELDS = ("module", "copy", "rank", "size", "iteration")
DEFAULT_GROUP = "main"
MAX_WORKFLOW_BYTES = 1 << 20   # 1 MiB: a workflow file is settings, not data
GOT = ", got"   # this file's messages read "expected ..., got ..." (diel.checks)


class ConfigWarning(UserWarning):
    """A setting that is valid but is probably not what was meant (``values: [1e-3,
    "0.01"]`` searches a number and a string). Checks raise it with
    ``warnings.warn(ConfigWarning(path, message))`` and go on; ``diel validate`` and
    ``diel run`` print each as ``diel: warning: FILE: KEY.PATH: message``, once, and the
    workflow runs. ``path`` and ``source`` are as in :class:`~diel.errors.ConfigError`."""

    def __init__(self, path: str, message: str, source: str | None = None) -> None:
        self.path, self.message, self.source = path, message, source
        super().__init__(ConfigError(path, message, source).render())

    def in_file(self, source: str) -> "ConfigWarning":
        """The same warning, attributed to the workflow file ``source``."""
        return ConfigWarning(self.path, self.message, source)


@dataclass(frozen=True)
class ModuleSpec:
    """One module of the workflow: what it runs and how many ranks it takes."""

    name: str
    function: str | None = None
    command: tuple[str, ...] | None = None
    size: int = 1
    copies: int = 1
    settings: Mapping[str, Any] = field(default_factory=dict)
    timeout: float | None = None

    @property
    def ranks(self) -> int:
        """World ranks this module occupies (all copies)."""
        return self.size * self.copies


@dataclass(frozen=True)
class GroupSpec:
    """Modules that run together, after other groups, for a number of iterations."""

    name: str
    modules: tuple[str, ...]
    after: tuple[str, ...] = ()
    iterations: int = 1


@dataclass(frozen=True)
class Workflow:
    """A validated workflow. ``groups`` are in an order that respects ``after``."""

    name: str
    path: Path
    modules: tuple[ModuleSpec, ...]
    services: tuple[str, ...]
    groups: tuple[GroupSpec, ...]

    @property
    def total_ranks(self) -> int:
        """The ``mpiexec -n`` this workflow needs."""
        return sum(module.ranks for module in self.modules)

    @property
    def directory(self) -> Path:
        """The folder holding the workflow file; relative paths resolve against it."""
        return self.path.parent

    def module(self, name: str) -> ModuleSpec:
        """The module called ``name`` (KeyError when there is none)."""
        for module in self.modules:
            if module.name == name:
                return module
        raise KeyError(name)

    def group_of(self, module: str) -> GroupSpec | None:
        """The group that runs ``module``, or None for a service."""
        for group in self.groups:
            if module in group.modules:
                return group
        return None


def load_workflow(path: str | Path) -> Workflow:
    """Read and validate the workflow at ``path``; raises ConfigError naming the file."""
    path = Path(path)
    source = str(path)
    text = _read_text(path, source)
    try:
        data = load_yaml(text)
    except DuplicateKeyError as exc:
        raise ConfigError(exc.path, exc.describe(), source) from None
    except YamlLimitError as exc:
        raise ConfigError("", str(exc), source) from None
    except yaml.YAMLError as exc:
        raise ConfigError("", f"not valid YAML{_yaml_problem(exc, text)}", source) from None
    try:
        return parse_workflow(data, path.resolve())
    except ConfigError as exc:
        raise exc.in_file(source) from None


def _yaml_problem(exc: yaml.YAMLError, text: str) -> str:
    """`` at line L, column C: what`` for a YAML error, on one line."""
    if isinstance(exc, yaml.reader.ReaderError):   # a character YAML does not allow
        line = text.count("\n", 0, exc.position) + 1
        code = exc.character if isinstance(exc.character, int) else ord(exc.character)
        return f" at line {line}: the character U+{code:04X} is not allowed in YAML text"
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"{where}: {' '.join(problem.split())}"


def _read_text(path: Path, source: str) -> str:
    """The text of the workflow file, refused past :data:`MAX_WORKFLOW_BYTES` without
    reading more than that (a file of any size, ``/dev/zero``, costs the same)."""
    try:
        with open(path, "rb") as stream:
            size = os.fstat(stream.fileno()).st_size
            data = b"" if size > MAX_WORKFLOW_BYTES else stream.read(MAX_WORKFLOW_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError("", "no such workflow file", shown_path(source)) from None
    except (OSError, ValueError) as exc:   # ValueError: a NUL character in the path
        raise ConfigError("", f"cannot read the workflow file: {os_reason(exc)}",
                          shown_path(source)) from None
    if max(size, len(data)) > MAX_WORKFLOW_BYTES:
        raise ConfigError("", f"the file is larger than {MAX_WORKFLOW_BYTES >> 20} MiB, the "
                              "most a workflow file may be (diel.executive.config.MAX_WORKFLOW_BYTES); "
                              "keep data in files of their own", source)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError("", f"not UTF-8 text: byte 0x{data[exc.start]:02x} at line {line}",
                          source) from None


def parse_workflow(data: Any, path: Path) -> Workflow:
    """Validate the parsed YAML ``data`` of the workflow file at ``path``."""
    top = _mapping(data, "", "the workflow file to be a mapping with a 'modules' key")
    _no_unknown_keys(top, TOP_KEYS, "")
    if "modules" not in top:
        raise ConfigError("modules", "missing; expected a mapping of module names to settings")
    raw_modules = _mapping(top["modules"], "modules", "a mapping of module names to settings")
    if not raw_modules:
        raise ConfigError("modules", "is empty; expected at least one module")
    modules = tuple(_parse_module(name, spec) for name, spec in raw_modules.items())
    names = [module.name for module in modules]
    services = _parse_services(top.get("services", []), names)
    groups = _parse_groups(top.get("groups"), names, services)
    name = non_empty_text(top.get("name", path.stem), "name", got=GOT)
    return Workflow(name=name, path=path, modules=modules, services=services,
                    groups=_in_dependency_order(groups))


def _parse_module(name: Any, spec: Any) -> ModuleSpec:
    path = f"modules.{name}"
    if not isinstance(name, str) or not name.isidentifier():
        raise ConfigError(path, "module names must be identifiers (letters, digits, '_')")
    spec = _mapping(spec, path, "a mapping with 'function' or 'command'")
    _no_unknown_keys(spec, MODULE_KEYS, path)
    has_function, has_command = "function" in spec, "command" in spec
    if has_function == has_command:
        found = "both are given" if has_function else "neither is given"
        raise ConfigError(path, f"expected exactly one of 'function' (pkg.mod:func or a builtin "
                                f"name) or 'command' (a list: program and arguments); {found}")
    size = _positive_int(spec.get("size", 1), f"{path}.size")
    copies = _positive_int(spec.get("copies", 1), f"{path}.copies")
    settings = _mapping(spec.get("settings", {}) or {}, f"{path}.settings", "a mapping")
    timeout = spec.get("timeout")
    if timeout is not None:
        if not has_command:
            raise ConfigError(f"{path}.timeout", "only executable ('command') modules take a timeout")
        positive_number(timeout, f"{path}.timeout", "a positive number of seconds", got=GOT)
    if has_function:
        function = non_empty_text(spec["function"], f"{path}.function",
                                  "'pkg.mod:func' or a builtin name", got=GOT)
        return ModuleSpec(name, function=function.strip(), size=size, copies=copies,
                          settings=dict(settings))
    command = _parse_command(spec["command"], f"{path}.command", settings)
    return ModuleSpec(name, command=command, size=size, copies=copies, settings=dict(settings),
                      timeout=None if timeout is None else float(timeout))


def _parse_command(command: Any, path: str, settings: Mapping[str, Any]) -> tuple[str, ...]:
    if isinstance(command, str):
        raise ConfigError(path, "expected a list such as [python, sim.py, --steps, '{steps}'], "
                                "not a string: commands never run through a shell")
    if not isinstance(command, list) or not command:
        raise ConfigError(path, "expected a non-empty list: the program and its arguments")
    for index, item in enumerate(command):
        if not (isinstance(item, str) or is_number(item)):
            raise ConfigError(f"{path}[{index}]", f"expected a string or number, got {item!r}")
    argv = tuple(str(item) for item in command)
    check_placeholders(argv, [*COMMAND_FIELDS, *settings], path,
                       "a key of 'settings' or a rank field")
    return argv


def _parse_services(raw: Any, names: list[str]) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
        raise ConfigError("services", f"expected a list of module names, got {raw!r}")
    for index, name in enumerate(raw):
        _known_module(name, names, f"services[{index}]")
    if len(set(raw)) != len(raw):
        raise ConfigError("services", "names a module more than once")
    return tuple(raw)


def _parse_groups(raw: Any, names: list[str], services: tuple[str, ...]) -> list[GroupSpec]:
    if raw is None:
        members = tuple(name for name in names if name not in services)
        return [GroupSpec(DEFAULT_GROUP, members)] if members else []
    raw = _mapping(raw, "groups", "a mapping of group names to {modules, after, iterations}")
    groups, owner = [], {}
    for group_name, spec in raw.items():
        path = f"groups.{group_name}"
        spec = _mapping(spec, path, "a mapping with 'modules' (and optionally 'after', 'iterations')")
        _no_unknown_keys(spec, GROUP_KEYS, path)
        modules = _name_list(spec.get("modules"), f"{path}.modules", required=True)
        for index, module in enumerate(modules):
            where = f"{path}.modules[{index}]"
            _known_module(module, names, where)
            if module in services:
                raise ConfigError(where, f"'{module}' is a service; services run for the whole "
                                         "workflow and belong to no group")
            if module in owner:
                raise ConfigError(where, f"'{module}' is already in group '{owner[module]}'; "
                                         "a module belongs to one group")
            owner[module] = group_name
        after = _name_list(spec.get("after", []), f"{path}.after", required=False)
        iterations = _positive_int(spec.get("iterations", 1), f"{path}.iterations")
        groups.append(GroupSpec(str(group_name), tuple(modules), tuple(after), iterations))
    group_names = [group.name for group in groups]
    for group in groups:
        for index, dependency in enumerate(group.after):
            where = f"groups.{group.name}.after[{index}]"
            if dependency not in group_names:
                raise ConfigError(where, f"no group named '{dependency}'; groups are "
                                         f"{', '.join(group_names)}")
            if dependency == group.name:
                raise ConfigError(where, "a group cannot come after itself")
    for name in names:
        if name not in owner and name not in services:
            raise ConfigError(f"modules.{name}", "is in no group and is not a service; add it "
                                                 "to a group's 'modules' or to 'services'")
    return groups


def _in_dependency_order(groups: list[GroupSpec]) -> tuple[GroupSpec, ...]:
    """Groups sorted so each comes after its dependencies; a cycle is an error."""
    by_name = {group.name: group for group in groups}
    ordered: list[GroupSpec] = []
    state: dict[str, str] = {}

    def visit(name: str, trail: list[str]) -> None:
        if state.get(name) == "done":
            return
        if state.get(name) == "visiting":
            cycle = trail[trail.index(name):] + [name]
            raise ConfigError(f"groups.{name}.after",
                              "the groups form a cycle: " + " -> ".join(cycle) +
                              "; 'after' must describe a DAG")
        state[name] = "visiting"
        for dependency in by_name[name].after:
            visit(dependency, trail + [name])
        state[name] = "done"
        ordered.append(by_name[name])

    for group in groups:
        visit(group.name, [])
    return tuple(ordered)


def _mapping(value: Any, path: str, expected: str) -> Mapping[Any, Any]:
    return mapping(value, path, expected, got=GOT, describe=_describe)


def _positive_int(value: Any, path: str) -> int:
    return whole_number(value, path, 1, "a whole number >= 1", got=GOT)


def _name_list(value: Any, path: str, required: bool) -> list[str]:
    if value is None and required:
        raise ConfigError(path, "missing; expected a list of module names")
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(path, f"expected a list of names, got {value!r}")
    if required and not value:
        raise ConfigError(path, "is empty; expected at least one module name")
    return value


def _known_module(name: str, names: list[str], path: str) -> None:
    if name not in names:
        hint = closest(name, names)
        suggestion = f"; did you mean '{hint}'?" if hint else f"; modules are {', '.join(names)}"
        raise ConfigError(path, f"no module named '{name}'{suggestion}")


def _no_unknown_keys(values: Mapping[Any, Any], allowed: tuple[str, ...], path: str) -> None:
    no_unknown_keys(values, allowed, path, lambda key: (
        f"unknown key{did_you_mean(key, allowed)}; expected one of {', '.join(allowed)}"))


def _describe(value: Any) -> str:
    if value is None:
        return "nothing (empty)"
    return f"{type(value).__name__} {value!r}"[:120]
