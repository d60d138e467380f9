"""The master's side of define-by-run: answering a trial's ``suggest`` report.

A trial's function calls ``trial.suggest_float("svc_c", 1e-10, 1e10, log=True)`` for a
parameter the ``space:`` does not declare; its worker puts a ``suggest`` report
(:func:`~diel.search.protocol.suggest_report`) and waits on the trial's
:func:`~diel.search.protocol.suggestion_tag`. The master answers at once, from its loop:
the strategy's sampler draws the value (:meth:`~diel.search.samplers.Sampler.suggest`:
through the Optuna trial it holds for the trial, or its own seeded draw), the trial's
params gain it, and a :class:`~diel.results.Suggested` row is committed with the pass's
other reports. A name the trial already has (asked twice, or before a crash: a resumed
trial's stored distributions) is answered with its value, without asking the sampler,
when the distribution is the same, and refused naming both when it is not; so each
parameter of a trial has one value and one distribution.

Workers are not trusted: a malformed request is answered with an error (the trial
fails with it), never raised here.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from diel.limits import LOG_TEXT_CHARS, PARAM_NAME_CHARS, clip
from diel.results import StoredTrial, Suggested
from diel.search.distributions import checked_distribution, describe
from diel.search.samplers import Sampler
from diel.search.space import SearchSpace

__all__ = ["Suggestions"]


class Suggestions:
    """Each running trial's suggested parameters, and the answers to its requests.

    ``resumed``: the trials left running by an earlier run, whose stored parameters and
    distributions a resumed attempt is answered with again."""

    def __init__(self, space: SearchSpace, sampler: Sampler,
                 resumed: Sequence[StoredTrial] = ()) -> None:
        self.declared = frozenset(space.names)
        self.sampler = sampler
        self.known: dict[int, dict[str, tuple[Any, dict[str, Any]]]] = {
            t.number: _stored(t) for t in resumed if t.distributions}

    def answer(self, report: Mapping[str, Any],
               params: dict[str, Any] | None) -> tuple[dict[str, Any], Suggested | None]:
        """The answer to ``report`` (``{"value": v}`` or ``{"error": text}``) and the row
        to record (None when nothing new was drawn). ``params``: the running trial's
        parameters, which gain the new value (None: the trial is not running here)."""
        number, name = report.get("trial"), report.get("name")
        if params is None:
            return {"error": f"trial {number!r} is not running in this search"}, None
        if not isinstance(name, str) or not name or len(name) > PARAM_NAME_CHARS:
            return {"error": f"a parameter name is a non-empty string of at most "
                             f"{PARAM_NAME_CHARS} characters; got {clip(repr(name), 300)}"}, None
        if name in self.declared:
            return {"error": f"{name} is declared in the space; its value is in "
                             "trial.params"}, None
        try:
            distribution = checked_distribution(report.get("distribution"))
        except ValueError as e:
            return {"error": f"trial.suggest_* for {name!r}: {clip(str(e), LOG_TEXT_CHARS)}"}, None
        known = self.known.setdefault(number, {})   # type: ignore[arg-type]
        if name in known:
            value, before = known[name]
            if before == distribution:
                return {"value": value}, None
            return {"error": f"trial.{_call(name, distribution)} disagrees with this trial's "
                             f"earlier trial.{_call(name, before)}: a parameter keeps one "
                             "distribution in a trial"}, None
        try:
            value = self.sampler.suggest(number, name, distribution)  # type: ignore[arg-type]
        except ValueError as e:
            return {"error": clip(str(e), LOG_TEXT_CHARS)}, None
        known[name] = (value, distribution)
        params[name] = value
        return {"value": value}, Suggested(number, name, value, distribution)  # type: ignore[arg-type]

    def finished(self, number: int) -> None:
        """Trial ``number`` ended (not paused): forget its suggestions."""
        self.known.pop(number, None)


def _stored(trial: StoredTrial) -> dict[str, tuple[Any, dict[str, Any]]]:
    """A resumed trial's suggested parameters: value and distribution, rebuilt as a new
    request's is (so the two compare alike); one that is not a distribution is left out
    (drawn again if asked)."""
    known = {}
    for name, distribution in trial.distributions.items():
        try:
            if name in trial.params:
                known[name] = (trial.params[name], checked_distribution(distribution))
        except ValueError:
            continue
    return known


def _call(name: str, distribution: Mapping[str, Any]) -> str:
    """``suggest_float('svc_c', 1e-10, 1e10, log=True)``."""
    return describe(distribution).replace("(", f"({name!r}, ", 1)
