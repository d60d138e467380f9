"""Finding a strategy's sampler by name: entry points of the group ``diel.samplers``.

diel registers its own strategies there (``grid``, ``random``, ``tpe``, ``gp``,
``cmaes``, ``qmc``, ``nsga2``; see pyproject.toml), and any installed package can add
one the same way, ``name = "package.module:SamplerClass"`` (docs/extending.md). The
``strategy`` setting is a name or a mapping of one name to its options.
"""

from __future__ import annotations

from typing import Any, Mapping

from diel.checks import closest
from diel.errors import ConfigError
from diel.plugins import load_plugin, plugin_names
from diel.search.samplers.base import Sampler

__all__ = ["GROUP", "strategy_names", "parse_strategy", "load_sampler"]

GROUP = "diel.samplers"


def strategy_names() -> list[str]:
    """The names of the installed strategies."""
    return plugin_names(GROUP)


def parse_strategy(value: Any, path: str) -> tuple[str, dict[str, Any], str]:
    """``strategy: NAME`` or ``strategy: {NAME: {option: value, ...}}`` (at key path
    ``path``) as the name, its options and the key path of the options."""
    if isinstance(value, str):
        return value, {}, path
    if isinstance(value, Mapping) and len(value) == 1:
        name, options = next(iter(value.items()))
        if isinstance(name, str) and (options is None or isinstance(options, Mapping)):
            return name, dict(options or {}), f"{path}.{name}"
    raise ConfigError(path, f"expected a strategy name ({', '.join(strategy_names())}) or a "
                            "mapping of one name to its options, e.g. "
                            f"{{tpe: {{n_startup_trials: 10}}}}; got {value!r}")


def load_sampler(name: str, path: str) -> type[Sampler]:
    """The :class:`Sampler` class registered as ``name``; a :class:`ConfigError` at
    ``path`` when there is none (with the closest installed name), when it fails to
    import, or when it is not a Sampler."""
    def unknown(names: list[str]) -> str:
        hint = closest(name, names)
        guess = f"did you mean {hint}? " if hint else ""
        return f"unknown strategy {name!r}; {guess}installed strategies: {', '.join(names) or 'none'}"

    return load_plugin(GROUP, name, path, "strategy", unknown, base=Sampler,
                       base_name="diel.search.samplers.Sampler")
