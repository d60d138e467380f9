"""The checks every settings parser in diel shares: a mapping, no unknown keys, a whole
number, a positive number, one of some choices, a non-empty text, a boolean, and the
"did you mean" hint for a misspelled name.

Each check returns the value it accepted or raises :class:`~diel.errors.ConfigError` at
the key path it is given (``modules.search.settings.max_trials``), saying what was
expected and what was found: ``expected an integer >= 1; got 0``. Parsers keep their own
words where they differ (the executive's and the worker's read ``expected ..., got ...``:
they pass ``got=", got"``; the phrase after "expected" can be given too), so a message
reads the same as before the parsers shared this kit.

A boolean is never a number here: YAML's ``true`` is Python's ``True``, an ``int``, and
``max_trials: true`` is a mistake, not one trial. This module imports nothing of diel
but :mod:`diel.errors`, so every part may use it (trainer/ keeps its own: it imports no
diel).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Sequence

from diel.errors import ConfigError

__all__ = ["closest", "did_you_mean", "unknown_key_message", "key_path", "no_unknown_keys",
           "is_whole", "is_number", "mapping", "whole_number", "positive_number", "one_of",
           "non_empty_text", "boolean"]


def closest(word: Any, choices: Iterable[str]) -> str | None:
    """The choice closest to ``word`` when one is close enough to be a typo of it
    (:func:`difflib.get_close_matches`' default cut-off), else None. difflib is imported
    here, for a mistake's message: every rank imports this module, few make mistakes."""
    import difflib

    hint = difflib.get_close_matches(str(word), list(choices), n=1)
    return hint[0] if hint else None


def did_you_mean(word: Any, choices: Iterable[str]) -> str:
    """`` (did you mean 'epochs'?)`` for the choice closest to ``word``; empty when none
    is close."""
    hint = closest(word, choices)
    return f" (did you mean {hint!r}?)" if hint is not None else ""


def unknown_key_message(key: Any, known: Sequence[str], what: str = "setting") -> str:
    """``unknown setting (did you mean 'timeout'?); known: ...``: the suggestion is the
    closest known key, when one is close enough to be a typo."""
    return f"unknown {what}{did_you_mean(key, known)}; known: {', '.join(known)}"


def key_path(path: str, key: Any) -> str:
    """The key path of ``key`` inside the mapping at ``path`` (the top level: ``""``)."""
    return f"{path}.{key}" if path else str(key)


def no_unknown_keys(values: Mapping[Any, Any], allowed: Sequence[str], path: str,
                    message: Callable[[Any], str] | None = None) -> None:
    """Raise :class:`ConfigError` at the key path of the first key of ``values`` that is
    not ``allowed``; its message is ``message(key)``, by default
    :func:`unknown_key_message` over ``allowed``."""
    for key in values:
        if key not in allowed:
            text = message(key) if message is not None else unknown_key_message(key, allowed)
            raise ConfigError(key_path(path, key), text)


def is_whole(value: Any) -> bool:
    """True for an ``int`` that is not a ``bool``."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """True for an ``int`` or a ``float`` that is not a ``bool`` (nan and inf included)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def mapping(value: Any, path: str, expected: str, got: str = "; got",
            describe: Callable[[Any], str] = repr) -> Mapping[Any, Any]:
    """``value`` when it is a mapping; else ``expected {expected}{got} {describe(value)}``."""
    if not isinstance(value, Mapping):
        raise ConfigError(path, f"expected {expected}{got} {describe(value)}")
    return value


def whole_number(value: Any, path: str, minimum: int = 0, expected: str | None = None,
                 got: str = "; got") -> int:
    """``value`` when it is a whole number (not a boolean) of at least ``minimum``; else
    ``expected an integer >= {minimum}; got ...`` (``expected`` replaces the phrase)."""
    if not is_whole(value) or value < minimum:
        raise ConfigError(path, f"expected {expected or f'an integer >= {minimum}'}{got} "
                                f"{value!r}")
    return value


def positive_number(value: Any, path: str, expected: str = "a number > 0",
                    got: str = "; got") -> int | float:
    """``value`` when it is a number (not a boolean) greater than 0 (nan is not); else
    ``expected a number > 0; got ...``."""
    if not is_number(value) or not value > 0:
        raise ConfigError(path, f"expected {expected}{got} {value!r}")
    return value


def one_of(value: Any, path: str, choices: Sequence[str], got: str = "; got") -> Any:
    """``value`` when it is one of ``choices``; else ``expected one of a, b; got ...``."""
    if value not in choices:
        raise ConfigError(path, f"expected one of {', '.join(choices)}{got} {value!r}")
    return value


def non_empty_text(value: Any, path: str, expected: str = "a non-empty string",
                   got: str = "; got") -> str:
    """``value`` when it is a string with more than white space in it; else ``expected
    a non-empty string; got ...``."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(path, f"expected {expected}{got} {value!r}")
    return value


def boolean(value: Any, path: str, got: str = "; got") -> bool:
    """``value`` when it is ``true`` or ``false``; else ``expected true or false; got ...``."""
    if not isinstance(value, bool):
        raise ConfigError(path, f"expected true or false{got} {value!r}")
    return value
