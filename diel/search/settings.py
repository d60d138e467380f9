"""The search master's settings (``modules.<name>.settings`` in the workflow), checked.

:func:`validate_settings` is what ``diel validate`` calls before anything starts; the
master itself calls :func:`parse_settings` and uses the returned :class:`SearchSettings`.
"""

from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass
from typing import Any, Mapping

from diel.checks import closest, is_number, mapping, no_unknown_keys, non_empty_text, one_of, \
    positive_number, whole_number
from diel.errors import ConfigError, ResultsError
from diel.executive.config import ConfigWarning, ModuleSpec, Workflow
from diel.executive.paths import os_reason, shown_path
from diel.plugins import BUILTINS
from diel.search.objective import BASE_METRICS, Expression, Objective, Objectives, Threshold, \
    parse_objectives
from diel.search.protocol import checkpoint_dir, database_url
from diel.search.samplers import Sampler, load_sampler, parse_strategy
from diel.search.schedulers import Scheduler, parse_pruner
from diel.search.space import MAX_POINTS, SearchSpace, parse_space
from diel.executive.yaml12 import resolve_number

__all__ = ["SearchSettings", "CheckpointSettings", "parse_settings", "validate_settings",
           "MODES"]

MODES = ("batch", "async")
KNOWN = ("strategy", "space", "mode", "workers", "max_trials", "time_budget", "stop_when",
         "seed", "objective", "direction", "objectives", "pruner", "study", "database",
         "checkpoints", "report_top", "metrics", "progress_interval", "prefetch", "stop_grace")
CHECKPOINT_KEYS = ("dir", "keep", "keep_best")
DEFAULT_STOP_GRACE = 120.0   # seconds a wall-time stop waits for running trials to pause
YAML11_BOOLEANS = ("yes", "no", "on", "off")   # booleans in YAML 1.1, strings in 1.2


@dataclass(frozen=True)
class CheckpointSettings:
    """``checkpoints: {dir, keep, keep_best}``: where the trials' durable checkpoints go
    (None: the default, :func:`diel.search.protocol.checkpoint_dir`), how many of each
    trial's latest are kept, and of how many best trials the final one is kept."""

    dir: str | None = None
    keep: int = 1
    keep_best: int = 1


@dataclass
class SearchSettings:
    """Everything the master needs, parsed (see docs/search.md for each key)."""

    strategy: str                     # the strategy's name (stored with the study)
    sampler: type[Sampler]            # its class, from the entry-point group diel.samplers
    strategy_options: dict[str, Any]  # its options (strategy: {name: {...}})
    space: SearchSpace
    mode: str
    workers: str
    objective: Objective              # the one objective, or the first of several
    objectives: Objectives            # every objective (one, or several: a Pareto front)
    max_trials: int | None
    time_budget: float | None
    stop_when: Threshold | None
    seed: int | None
    pruner: Scheduler | None          # the scheduler named by pruner: (None: none)
    prune_metric: Expression | None
    prune_direction: str
    study: str | None
    database: str | None
    checkpoints: CheckpointSettings
    report_top: int | None            # None: several objectives, report the whole front
    progress_interval: float
    prefetch: int | None
    raw: dict[str, Any]
    stop_grace: float = DEFAULT_STOP_GRACE   # a wall-time stop waits this long for pauses


def _choice(settings: Mapping, key: str, path: str, choices: tuple[str, ...],
            default: str) -> str:
    return one_of(settings.get(key, default), f"{path}.{key}", choices)


def _positive(settings: Mapping, key: str, path: str, integer: bool,
              default: float | None = None) -> Any:
    value = settings.get(key, default)
    if value is None:
        return None
    if integer:
        return whole_number(value, f"{path}.{key}", 1, expected="an integer > 0")
    return positive_number(value, f"{path}.{key}")


def _text(settings: Mapping, key: str, path: str, default: str | None) -> str | None:
    value = settings.get(key, default)
    return None if value is None else non_empty_text(value, f"{path}.{key}")


def parse_settings(settings: Any, path: str) -> SearchSettings:
    """Check ``settings`` (the module's ``settings:`` mapping, at key path ``path``) and
    return them parsed. Raises :class:`ConfigError` naming the key path."""
    settings = mapping({} if settings is None else settings, path, "a mapping of search settings")
    no_unknown_keys(settings, KNOWN, path, _unknown_setting)
    strategy, strategy_options, options_path = parse_strategy(settings.get("strategy", "grid"),
                                                     f"{path}.strategy")
    sampler = load_sampler(strategy, f"{path}.strategy")
    if "space" in settings:
        space = parse_space(settings["space"], f"{path}.space", sampler.kinds, strategy)
    elif sampler.suggests:   # define-by-run: the trials' suggest_* calls make the space
        space = SearchSpace(())
    else:
        raise ConfigError(f"{path}.space", f"strategy {strategy} needs a declared space: a "
                                           "mapping of parameter names to specs, e.g. {lr: "
                                           "{values: [0.1, 0.01]}}; or choose a strategy that "
                                           "lets the objective's trial.suggest_* calls define "
                                           "it (random, tpe, gp, cmaes, qmc, nsga2)")
    size = sampler.size(space)
    if size is not None and size > MAX_POINTS:
        raise ConfigError(f"{path}.space", f"strategy {strategy} would search {size} points; "
                                           f"at most {MAX_POINTS} are allowed (use strategy: "
                                           "random for large spaces)")
    extra = settings.get("metrics", [])
    if not (isinstance(extra, list) and all(isinstance(m, str) and m.isidentifier()
                                            for m in extra)):
        raise ConfigError(f"{path}.metrics", "expected a list of extra metric names the "
                                             f"workers report; got {extra!r}")
    names = [*BASE_METRICS, *extra]
    objectives = parse_objectives(settings, path, names)
    objective = objectives.first
    sampler.check(strategy, space, objectives.directions, strategy_options, options_path)
    threshold = _threshold(settings.get("stop_when"), f"{path}.stop_when", names, objectives)
    max_trials = _positive(settings, "max_trials", path, integer=True)
    time_budget = _positive(settings, "time_budget", path, integer=False)
    if size is None and max_trials is None and time_budget is None and not sampler.schedules:
        raise ConfigError(path, f"a {strategy} search needs max_trials or time_budget to end")
    strategy_options = sampler.completed(strategy_options, max_trials, None, path)
    seed = settings.get("seed")
    if seed is not None:
        whole_number(seed, f"{path}.seed", 0)
    mode = _choice(settings, "mode", path, MODES, "async")
    if sampler.schedules and mode != "async":
        raise ConfigError(f"{path}.mode", f"strategy {strategy} trains its members "
                                          "asynchronously (each decides as it reaches an "
                                          "interval): leave mode out, or set it to async")
    if sampler.schedules and settings.get("pruner", "none") != "none":
        raise ConfigError(f"{path}.pruner", f"strategy {strategy} schedules its trials itself "
                                            f"(exploit and explore): remove {path}.pruner, or "
                                            f"choose another {path}.strategy")
    pruner, options = parse_pruner(settings.get("pruner"), f"{path}.pruner")
    kind_path = f"{path}.pruner.{next(iter(settings['pruner']))}" if isinstance(
        settings.get("pruner"), Mapping) else f"{path}.pruner"
    prune_metric = (Expression(options.get("metric", objective.text), f"{kind_path}.metric",
                               names) if pruner is not None or sampler.schedules else None)
    prune_direction = _choice(options, "direction", kind_path, ("maximize", "minimize"),
                              objective.direction)
    return SearchSettings(
        strategy=strategy, sampler=sampler, strategy_options=strategy_options, space=space,
        mode=mode,
        workers=_text(settings, "workers", path, "trainer"), objective=objective,
        objectives=objectives,
        max_trials=max_trials, time_budget=time_budget, stop_when=threshold, seed=seed,
        pruner=pruner, prune_metric=prune_metric, prune_direction=prune_direction,
        study=_text(settings, "study", path, None),
        database=_text(settings, "database", path, None),
        checkpoints=_checkpoints(settings.get("checkpoints"), f"{path}.checkpoints"),
        report_top=_positive(settings, "report_top", path, integer=True,
                             default=None if objectives.several else 5),
        progress_interval=_positive(settings, "progress_interval", path, integer=False,
                                    default=10.0),
        prefetch=_prefetch(settings, path),
        raw=dict(settings),
        stop_grace=_positive(settings, "stop_grace", path, integer=False,
                             default=DEFAULT_STOP_GRACE))


def _unknown_setting(key: Any) -> str:
    """``unknown setting; did you mean mode? known: ...``"""
    hint = closest(key, KNOWN)
    return f"unknown setting; {f'did you mean {hint}? ' if hint else ''}known: {', '.join(KNOWN)}"


def _threshold(text: Any, path: str, names: list[str], objectives: Objectives) -> Threshold | None:
    """The ``stop_when`` rule: over the metrics and, in a search of one objective, the
    name ``objective``; with several objectives that name would be ambiguous."""
    if text is None:
        return None
    threshold = Threshold(text, path, [*names, "objective"])
    if objectives.several and "objective" in threshold.left.names | threshold.right.names:
        raise ConfigError(path, f"this search has {len(objectives)} objectives, so 'objective' "
                                "names none of them; compare a metric or an expression of "
                                "metrics, e.g. 'accuracy >= 0.97'")
    return threshold


def _checkpoints(value: Any, path: str) -> CheckpointSettings:
    """``checkpoints: {dir: PATH, keep: 1, keep_best: 1}``, each key optional: ``keep``
    at least 1 (a running trial resumes from its latest), ``keep_best`` at least 0."""
    if value is None:
        return CheckpointSettings()
    value = mapping(value, path, "a mapping such as {dir: checkpoints, keep: 1, keep_best: 1}")
    no_unknown_keys(value, CHECKPOINT_KEYS, path)
    return CheckpointSettings(
        _text(value, "dir", path, None),
        whole_number(value.get("keep", 1), f"{path}.keep", 1),
        whole_number(value.get("keep_best", 1), f"{path}.keep_best", 0))


def _prefetch(settings: Mapping, path: str) -> int | None:
    """Tasks queued per worker beyond the one it runs (async mode), so that a worker
    never waits for the master's commit before its next trial; ``auto`` (None) sizes
    the queue from how long trials take against how long a master pass takes."""
    value = settings.get("prefetch", "auto")
    if value == "auto":
        return None
    return whole_number(value, f"{path}.prefetch", 0, expected="auto or a whole number >= 0")


def validate_settings(settings: dict, path: str, module: ModuleSpec | None = None,
                      workflow: Workflow | None = None) -> None:
    """Raise :class:`ConfigError` (with the key path) if the search settings are wrong.

    Called by ``diel validate`` (and by every rank of ``diel run``) for the builtin
    ``search`` module before anything runs. Given the ``workflow``, it also checks what
    only the whole workflow can tell: that ``workers`` names one of its other modules,
    that they can run what the search sends (:func:`_check_searched`), and that the
    results database the master will open (``database``, else the SQLite file beside the
    workflow) can be opened and written, and the checkpoint folder created and written,
    without creating or changing either. Values that are valid but likely mistaken give a
    :class:`~diel.executive.config.ConfigWarning`.
    """
    parsed = parse_settings(settings, path)
    _warn_lookalike_values(parsed.space, f"{path}.space")
    if workflow is None:
        return
    _check_workers(parsed.workers, f"{path}.workers", workflow,
                   module.name if module is not None else None)
    _check_searched(parsed, path, workflow)
    _check_database(parsed.database, f"{path}.database", workflow)
    _check_checkpoints(parsed, f"{path}.checkpoints", workflow)


def _warn_lookalike_values(space: SearchSpace, path: str) -> None:
    """Warn about searched values that YAML read as strings but were likely meant
    otherwise: quoted numbers among numbers (``[1e-3, "0.01"]`` gives the trials a float
    and a string), and only ``yes``/``no``/``on``/``off``, which are strings in YAML 1.2."""
    for param in space.params:
        points = param.points or ()
        strings = [value for value in points if isinstance(value, str)]
        where = f"{path}.{param.name}.{param.kind}"
        numbers = any(is_number(value) for value in points)
        lookalikes = [text for text in strings if resolve_number(text.strip()) is not None]
        if numbers and lookalikes:
            quoted = ", ".join(map(repr, lookalikes))
            warnings.warn(ConfigWarning(where, (
                f"mixes numbers with strings that look like numbers ({quoted}); quoted values "
                "stay strings, so trials would get both kinds: write them unquoted")))
        if strings and len(strings) == len(points) and all(
                text.lower() in YAML11_BOOLEANS for text in strings):
            warnings.warn(ConfigWarning(where, (
                f"{', '.join(map(repr, strings))} are strings (diel reads YAML 1.2, where "
                "only true and false are booleans); write true/false for booleans")))


def _check_searched(parsed: SearchSettings, path: str, workflow: Workflow) -> None:
    """Check that the workers can run what the search sends them.

    A worker module's Python module may define ``check_searched_params(names, path,
    settings)`` raising :class:`ConfigError` for the names the search varies (the
    builtin ``trainer`` does: a misspelled searched setting would otherwise be ignored
    and every trial would train the same network). diel's own worker modules (``worker``,
    ``trainer``) also get their program's placeholders checked against the space
    (:func:`~diel.worker.settings.check_searched_program`) and their ``study`` checked
    against the search's: workers on another study would wait for ever.
    """
    from diel.worker.settings import check_searched_program

    spec = next(m for m in workflow.modules if m.name == parsed.workers)
    if spec.command is not None:
        return
    module_name = _worker_module_name(spec)
    settings = dict(spec.settings)
    names = parsed.space.names
    check = getattr(sys.modules.get(module_name), "check_searched_params", None)
    if callable(check):
        check(names, f"{path}.space", settings)
    if module_name.startswith("diel.worker."):
        worker_path = f"modules.{spec.name}.settings"
        check_searched_program(settings, names, worker_path)
        _check_study(parsed.study, path, workflow.name, settings.get("study"), worker_path)


#: diel's builtin worker modules whose Python module defines no ``check_searched_params``
#: (a test keeps this true).
UNCHECKED_BUILTINS = frozenset({"worker"})


def _worker_module_name(spec: ModuleSpec) -> str:
    """The name of the Python module of worker module ``spec``'s function, imported (to
    look for its ``check_searched_params``), but for a builtin of
    :data:`UNCHECKED_BUILTINS`, named from :data:`~diel.plugins.BUILTINS`: the master
    need not import diel.worker.module's trial runners, tuple-space link and subprocess
    only to find nothing there (some 10 ms of its start, which every rank waits for)."""
    from diel.executive.modules import ENTRY_POINT_GROUP, resolve_function

    if spec.function in UNCHECKED_BUILTINS:
        return BUILTINS[ENTRY_POINT_GROUP][spec.function].partition(":")[0]
    return resolve_function(spec).__module__


def _check_study(study: str | None, path: str, workflow_name: str, worker_study: Any,
                 worker_path: str) -> None:
    """The workers' ``study``, when they set one, is the search's (by default the
    workflow's name): tasks are queued under the search's study."""
    ours = study or workflow_name
    if not isinstance(worker_study, str) or not worker_study or worker_study == ours:
        return
    given = f"'{ours}'" if study else f"not set, so the workflow's name '{ours}'"
    raise ConfigError(f"{worker_path}.study", (
        f"'{worker_study}' differs from {path}.study ({given}); the workers would wait for "
        f"tasks of a study the search never runs: remove {worker_path}.study (workers serve "
        "their search's study) or make the two equal"))


def _check_workers(workers: str, path: str, workflow: Workflow, own_name: str | None) -> None:
    """``workers`` must name another module of the workflow (a typo gets a suggestion)."""
    names = [spec.name for spec in workflow.modules]
    if workers == own_name:
        raise ConfigError(path, f"'{workers}' is this search module itself; name the module "
                                "that trains the trials (e.g. a 'trainer' or 'worker' module)")
    if workers not in names:
        others = [name for name in names if name != own_name]
        hint = closest(workers, others)
        suggestion = (f"did you mean '{hint}'?" if hint
                      else f"modules are {', '.join(others) or 'none'}")
        raise ConfigError(path, f"no module named '{workers}' in the workflow; {suggestion}")
    groups = {name: group.name for group in workflow.groups for name in group.modules}
    ours, theirs = groups.get(own_name or ""), groups.get(workers)
    if ours is not None and theirs is not None and ours != theirs:
        raise ConfigError(path, f"the workers '{workers}' run in group '{theirs}' and this "
                                f"search in group '{ours}': they must run together, or the "
                                "search would wait forever; put both in one group")


def _check_database(database: str | None, path: str, workflow: Workflow) -> None:
    """The results database can be opened and written
    (:func:`diel.results.check_database`); a store whose results end with the job
    (``memory://``) is allowed, with a warning."""
    from diel.results import DatabaseProblem, check_database, keeps_results

    try:
        url = database_url(database, workflow.directory, workflow.name)
        check_database(url, path)
    except (DatabaseProblem, ResultsError) as e:
        where = "" if database else " (the default results database beside the workflow)"
        raise ConfigError(path, f"{e}{where}") from None
    if not keeps_results(url, path):
        warnings.warn(ConfigWarning(path, (
            f"{database} keeps the results in the search master's memory: they are gone "
            "when the job ends (only its final report is printed) and the study cannot be "
            "resumed; meant for tests and benchmarks, name a file or a database URL to keep "
            "them")))


def _check_checkpoints(parsed: SearchSettings, path: str, workflow: Workflow) -> None:
    """The checkpoint folder (:func:`~diel.search.protocol.checkpoint_dir`) can be
    created and written (:func:`diel.results.folder_problem`), creating nothing. A
    ``dir`` set is an error at ``<path>.dir``; the default folder only a warning: a
    search whose trials never checkpoint does not need it."""
    from diel.results import folder_problem

    given = parsed.checkpoints.dir
    try:
        folder = checkpoint_dir(given, database_url(parsed.database, workflow.directory,
                                                    workflow.name), workflow.directory)
        problem = folder_problem(folder)
    except (OSError, ValueError, RuntimeError) as e:   # ~nosuchuser
        problem = f"{shown_path(given or '')} cannot be used: {os_reason(e)}"
    if problem is None:
        return
    if given:
        raise ConfigError(f"{path}.dir", problem)
    warnings.warn(ConfigWarning(path, (
        f"{problem} (the default checkpoint folder); trials that checkpoint could not keep "
        f"their checkpoints: set {path}.dir to a folder the search may write")))
