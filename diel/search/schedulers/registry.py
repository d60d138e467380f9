"""Finding a scheduler by name: entry points of the group ``diel.schedulers``.

diel registers its own there (``median``, ``halving``, ``hyperband``; see
pyproject.toml), and any installed package can add one the same way, ``name =
"package.module:SchedulerClass"`` (docs/extending.md). The workflow names it under the
search's ``pruner:`` key: ``none``, a name, or a mapping of one name to its options.
"""

from __future__ import annotations

from typing import Any, Mapping

from diel.checks import mapping, unknown_key_message
from diel.errors import ConfigError
from diel.plugins import load_plugin, plugin_names
from diel.search.schedulers.base import CARRIED_OUT, SHARED_OPTIONS, Scheduler

__all__ = ["GROUP", "scheduler_names", "load_scheduler", "parse_pruner"]

GROUP = "diel.schedulers"


def scheduler_names() -> list[str]:
    """The names of the installed schedulers."""
    return plugin_names(GROUP)


def load_scheduler(name: str, path: str) -> type[Scheduler]:
    """The :class:`Scheduler` class registered as ``name``; a :class:`ConfigError` at
    ``path`` when there is none (with the closest installed name), when it fails to
    import, when it is not a Scheduler, or when it may answer an action this diel
    cannot carry out yet (:data:`~diel.search.schedulers.base.CARRIED_OUT`)."""
    cls = load_plugin(GROUP, name, path, "scheduler",
                      lambda names: unknown_key_message(name, [*names, "none"], "pruner"),
                      base=Scheduler, base_name="diel.search.schedulers.Scheduler")
    beyond = sorted(getattr(action, "value", repr(action))
                    for action in set(cls.actions) - CARRIED_OUT)
    if beyond:
        raise ConfigError(path, f"scheduler {name} may {' or '.join(beyond)} a trial, which "
                                "this diel cannot yet do: it continues, stops, pauses and "
                                "exploits trials only; choose another scheduler")
    return cls


def parse_pruner(spec: Any, path: str) -> tuple[Scheduler | None, Mapping[str, Any]]:
    """Read ``pruner:`` (at key path ``path``): ``none``, a scheduler's name, or ``{NAME:
    {...}}`` with the scheduler's own options plus the master's ``metric`` (an
    expression over the epoch metrics; default the objective) and ``direction``
    (default the objective's).

    Returns the scheduler (``None`` for none), made by its class's
    :meth:`~Scheduler.from_options`, and the options mapping (for metric/direction).
    """
    if spec is None or spec == "none":
        return None, {}
    if isinstance(spec, str):
        spec = {spec: {}}
    if not (isinstance(spec, Mapping) and len(spec) == 1):
        raise ConfigError(path, f"expected none, {', '.join(scheduler_names())}, or a mapping "
                                "such as {median: {min_trials: 3, warmup_epochs: 1}}")
    (name, options), = spec.items()
    cls = load_scheduler(name, path)
    options = mapping({} if options is None else options, f"{path}.{name}",
                      "a mapping of options")
    own = {key: value for key, value in options.items() if key not in SHARED_OPTIONS}
    return cls.from_options(name, own, f"{path}.{name}"), options
