"""The ``trial`` object a user's objective function receives, and how a trial ends early.

``objective(trial)`` reads ``trial.params``, trains, calls ``trial.report(step, **metrics)``
after each epoch (True means stop now: the master pruned the trial, or asked it to pause)
and returns a mapping of metrics or one number. A trial that keeps its progress calls
``trial.restore()`` at its start and ``trial.checkpoint(state)`` after each report.
Everything else (tasks, tags, isolation, timeouts, where checkpoints are written) is the
worker's business, so the same function runs in an isolated child, in the MPI rank itself
or in a test with a hand-made ``Trial``.

The trial also speaks Optuna's vocabulary, so an objective written for Optuna runs
unchanged: ``suggest_float``, ``suggest_int``, ``suggest_categorical`` (a declared
parameter's value, checked against its declaration; an undeclared one asked of the
search master: define-by-run), ``report(value, step)``, ``should_prune()``,
``set_user_attr``, ``number`` and ``params``; ``optuna.TrialPruned`` raised by the
objective is a prune, like diel's :class:`TrialPruned`, and a returned number is the
objective's value. How ``report`` tells the two forms apart: :meth:`Trial.report`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from diel.errors import DielError
from diel.limits import METRIC_NAME_CHARS, METRIC_TEXT_CHARS, METRICS_PER_REPORT, \
    USER_ATTRS, clip
from diel.search.distributions import categorical_distribution, describe, \
    float_distribution, int_distribution

__all__ = ["Trial", "TrialPruned", "TrialTimedOut", "SuggestFailed", "Reporter",
           "Checkpointer", "Restorer", "Suggester", "GO", "PRUNE", "PAUSE", "order_of",
           "clean_metrics", "metrics_of_return", "is_prune"]

GO, PRUNE, PAUSE = "go", "prune", "pause"   # the master's answers to a report

#: ``reporter(step, metrics) -> order``: what the worker does with one report, and the
#: master's answer: :data:`GO`, :data:`PRUNE` or :data:`PAUSE` (as :func:`order_of` reads it).
Reporter = Callable[[int, dict[str, Any]], Any]
#: ``checkpointer(step, state)``: serialize ``state`` and have it written durably.
Checkpointer = Callable[[int, Any], None]
#: ``restorer() -> (step, state) | None``: the checkpoint this attempt resumes from.
Restorer = Callable[[], tuple[int, Any] | None]
#: ``suggester(name, distribution, params) -> value``: a ``suggest_*`` call's value (the
#: declared one, checked, or the master's answer); raises :class:`SuggestFailed`.
Suggester = Callable[[str, dict[str, Any], dict[str, Any]], Any]


def order_of(answer: Any) -> str:
    """A reporter's answer as an order: ``"pause"`` and an exploit order (a mapping with
    ``exploit``, :func:`diel.search.protocol.exploit_order`: the trial's run ends as on a
    pause, and the master dispatches it again) are :data:`PAUSE`; ``True``, ``"stop"``
    and ``"prune"`` are :data:`PRUNE` (a prune order on the prune tag is ``True``); anything
    else, ``False`` and ``None`` included, is :data:`GO`."""
    if answer == PAUSE or (isinstance(answer, Mapping) and "exploit" in answer):
        return PAUSE
    return PRUNE if answer is True or answer in ("stop", PRUNE) else GO


class TrialPruned(DielError):
    """Raise from an objective function to stop a pruned trial (returning works too)."""


class TrialTimedOut(DielError):
    """Raised by ``trial.report`` once the trial has run past its timeout."""


class SuggestFailed(DielError):
    """A ``trial.suggest_*`` call that cannot be served: it disagrees with the declared
    space or with the same trial's earlier call, or the search could not answer it. The
    trial fails with its message."""


def is_prune(error: BaseException) -> bool:
    """True for diel's :class:`TrialPruned` and Optuna's ``optuna.TrialPruned`` (found
    only when the objective's code imported Optuna: the worker never imports it)."""
    if isinstance(error, TrialPruned):
        return True
    optuna_exceptions = sys.modules.get("optuna.exceptions")
    pruned = getattr(optuna_exceptions, "TrialPruned", None)
    return pruned is not None and isinstance(error, pruned)


@dataclass
class Trial:
    """One trial as the user's function sees it.

    ``params``: the sampled parameters, over the worker's fixed ``params`` setting;
    ``number``: the trial number in the study; ``study``: the study name; ``copy`` and
    ``rank``: which worker copy and which rank of it runs this call; ``comm``: the copy's
    communicator when a trial spans several ranks (``size > 1``), else None;
    ``device``: the GPU index this rank should use (CUDA numbering as this process sees
    it), or None without a GPU; ``checkpoint_every``: the epochs between the checkpoints
    the search needs (population-based training's interval; None: none asked).

    A trial that keeps its progress restores at its start, reports each epoch,
    checkpoints after the report and stops when the report says so::

        def objective(trial):
            model, opt = build(trial.params)
            first, metrics = 1, {}
            if (saved := trial.restore()) is not None:      # a resumed trial
                step, state = saved
                model.load_state_dict(state["model"]); opt.load_state_dict(state["opt"])
                first, metrics = step + 1, state["metrics"]
            for epoch in range(first, EPOCHS + 1):
                metrics = train_one_epoch(model, opt)
                stop = trial.report(epoch, **metrics)       # pruned, or asked to pause
                trial.checkpoint({"model": model.state_dict(), "opt": opt.state_dict(),
                                  "metrics": metrics})
                if stop:
                    break
            return metrics

    Checkpointing after the report keeps the step a paused trial stops at: its next
    attempt resumes after it and trains no epoch twice.
    """

    params: dict[str, Any]
    number: int
    study: str
    copy: int = 0
    rank: int = 0
    comm: Any = None
    device: int | None = None
    checkpoint_every: int | None = None
    _reporter: Reporter | None = field(default=None, repr=False)
    _checkpointer: Checkpointer | None = field(default=None, repr=False)
    _restorer: Restorer | None = field(default=None, repr=False)
    _suggester: Suggester | None = field(default=None, repr=False)
    _order: str = field(default=GO, repr=False)
    _suggested: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)
    last_step: int = 0
    last_metrics: dict[str, Any] = field(default_factory=dict)
    user_attrs: dict[str, Any] = field(default_factory=dict)

    def report(self, *args: Any, **metrics: Any) -> bool:
        """Report the metrics of a step (an epoch); True when the trial should stop now:
        the master pruned it, or asked it to pause (:attr:`should_checkpoint`).

        Two forms, told apart by the arguments alone:

        - Optuna's ``report(value, step)``: exactly two positional arguments and no
          keywords, or ``report(value, step=k)``, or ``report(value=v, step=k)``. It
          reports one metric named ``value`` at ``step`` (so the search's objective or
          pruner names ``value``).
        - diel's ``report(step, **metrics)``: any other call, the step first (or
          ``step=``) and the metrics as keywords, e.g. ``report(3, loss=0.2)``.

        ``report(value=v, step=k)`` means the same in both. The master sees every
        report (early stopping, curves in the database). At a step where the search's
        scheduler decides (a halving rung; a step past the median rule's warm-up) the
        call waits for the master's answer, so a pruned trial trains no step past it;
        any other report returns at once. Raises :class:`TrialTimedOut`
        once the trial is past its timeout, so a function that reports regularly stops
        cleanly; on every rank of the copy at the same step. Once a report says stop,
        later ones say so too without asking the master again.
        """
        step, metrics = _report_form(args, metrics)
        if isinstance(step, bool) or not isinstance(step, int):
            raise TypeError(f"trial.report: step must be an int (an epoch number), got {step!r}")
        values = clean_metrics(metrics)
        self.last_step, self.last_metrics = step, values
        if self._reporter is not None and self._order == GO:
            self._order = order_of(self._reporter(step, values))
        return self._order != GO

    def checkpoint(self, state: Any, step: int | None = None) -> None:
        """Keep ``state`` (any picklable object: a dict of ``state_dict()``s, NumPy
        arrays, RNG states) as of ``step``, by default the last reported one.

        Returns once the state is serialized (its large buffers copied once, so the
        trial may change them at once); the durable write goes on in the background,
        and the master learns of the checkpoint only once it is on disk. A second
        checkpoint of the same step replaces the first. In a copy of several ranks,
        rank 0's call checkpoints and the other ranks' calls return at once.
        Without a worker (a hand-made ``Trial`` in a test) the state is serialized,
        so that a state that cannot be pickled fails here as it would in a search.
        """
        if step is None:
            step = self.last_step
        elif isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise TypeError(f"trial.checkpoint: step must be an int >= 0 (an epoch number), "
                            f"got {step!r}")
        if self._checkpointer is None:
            from diel.checkpoints import take   # here: a trial process starts without it

            take(state)
        else:
            self._checkpointer(step, state)

    def restore(self) -> tuple[int, Any] | None:
        """``(step, state)`` of the checkpoint this attempt resumes from (the trial's
        latest durable one), or None for a trial that starts from scratch.

        Call it once, at the start: each call reads the checkpoint again. In a copy of
        several ranks every rank must call it (rank 0 reads, and broadcasts over
        :attr:`comm`), and every rank gets the same ``(step, state)``. After it the
        default step of :meth:`checkpoint` is the restored one until the next report.
        """
        saved = self._restorer() if self._restorer is not None else None
        if saved is not None:
            self.last_step = max(self.last_step, saved[0])
        return saved

    def should_prune(self) -> bool:
        """True once a report was answered with a prune order (Optuna's
        ``trial.should_prune()``: raise ``optuna.TrialPruned`` or
        :class:`TrialPruned`, or return)."""
        return self._order == PRUNE

    def suggest_float(self, name: str, low: float, high: float, *, step: float | None = None,
                      log: bool = False) -> float:
        """Optuna's ``suggest_float``: the value of float parameter ``name``."""
        return self._suggest(name, float_distribution(low, high, step, log))

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1,
                    log: bool = False) -> int:
        """Optuna's ``suggest_int``: the value of integer parameter ``name``."""
        return self._suggest(name, int_distribution(low, high, step, log))

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        """Optuna's ``suggest_categorical``: one of ``choices`` (numbers, strings,
        booleans or None)."""
        return self._suggest(name, categorical_distribution(choices))

    def _suggest(self, name: str, distribution: dict[str, Any]) -> Any:
        """The value of ``name``: a parameter the space declares is already in
        :attr:`params` and the call is checked against its declaration; any other is
        asked of the search master once (define-by-run) and added to :attr:`params`. A
        second call for the same name must give the same distribution. Without a search
        (a hand-made ``Trial``) the value comes from :attr:`params`, so a trial's stored
        parameters replay it. :class:`SuggestFailed` when the call cannot be served."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"trial.suggest_*: name must be a non-empty string, got {name!r}")
        earlier = self._suggested.get(name)
        if earlier is not None:
            if earlier != distribution:
                raise SuggestFailed(
                    f"trial.{_call(name, distribution)} disagrees with this trial's earlier "
                    f"trial.{_call(name, earlier)}: a parameter keeps one distribution in a trial")
            return self.params[name]
        if self._suggester is not None:
            value = self._suggester(name, distribution, self.params)
        elif name in self.params:
            value = self.params[name]
        else:
            raise SuggestFailed(f"trial.{_call(name, distribution)}: {name} is not in "
                                "trial.params and no search runs this trial to ask")
        self.params[name] = value
        self._suggested[name] = distribution
        return value

    def set_user_attr(self, key: str, value: Any) -> None:
        """Optuna's ``set_user_attr``: keep ``value`` (a number, string, bool or None)
        with the trial; it is stored among the trial's result metrics under ``key``
        (clipped as metrics are; at most :data:`~diel.limits.USER_ATTRS` keys)."""
        clean = clean_metrics({key: value})
        if len(self.user_attrs) >= USER_ATTRS and next(iter(clean)) not in self.user_attrs:
            raise ValueError(f"more than {USER_ATTRS} user attributes in one trial "
                             "(diel.limits.USER_ATTRS)")
        self.user_attrs.update(clean)

    @property
    def should_pause(self) -> bool:
        """True once the master asked this trial to keep its progress and stop (a
        wall-time stop, a scheduler that pauses it or has it exploit another trial)."""
        return self._order == PAUSE

    @property
    def should_checkpoint(self) -> bool:
        """True when the trial should checkpoint now: the master asked it to keep its
        progress and stop (:attr:`should_pause`: checkpoint, then return; the trial is
        recorded ``paused`` and its next attempt resumes from its checkpoint), or the
        last reported step is a multiple of :attr:`checkpoint_every` (population-based
        training: other members may go on from it)."""
        every = self.checkpoint_every
        return self.should_pause or bool(every and self.last_step and
                                         self.last_step % every == 0)


def _call(name: str, distribution: Mapping[str, Any]) -> str:
    """``suggest_float('svc_c', 1e-10, 10000000000.0, log=True)``."""
    return describe(distribution).replace("(", f"({name!r}, ", 1)


def _report_form(args: tuple[Any, ...], metrics: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """``(step, metrics)`` of a ``trial.report`` call in either form (:meth:`Trial.report`)."""
    if len(args) == 2 and not metrics:                       # Optuna: report(value, step)
        return args[1], {"value": args[0]}
    if len(args) == 1 and set(metrics) == {"step"}:          # Optuna: report(value, step=k)
        return metrics["step"], {"value": args[0]}
    if len(args) == 1:                                       # diel: report(step, **metrics)
        return args[0], metrics
    if not args and "step" in metrics:                       # diel: report(step=k, **metrics)
        rest = dict(metrics)
        return rest.pop("step"), rest
    raise TypeError("trial.report takes diel's report(step, **metrics), e.g. report(3, "
                    "loss=0.2), or Optuna's report(value, step); got "
                    f"{len(args)} positional argument(s) and keywords {sorted(metrics)}")


def clean_metrics(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """Metrics as plain JSON values: NumPy and torch scalars become floats; names are
    clipped to :data:`~diel.limits.METRIC_NAME_CHARS` characters and string values to
    :data:`~diel.limits.METRIC_TEXT_CHARS` (:func:`~diel.limits.clip`).

    ValueError for more than :data:`~diel.limits.METRICS_PER_REPORT` metrics; anything
    that is not a number, string, bool or None raises TypeError naming it.
    """
    if len(metrics) > METRICS_PER_REPORT:
        raise ValueError(f"{len(metrics)} metrics in one report; at most {METRICS_PER_REPORT} "
                         "are taken (diel.limits.METRICS_PER_REPORT): report fewer")
    clean: dict[str, Any] = {}
    for key, value in metrics.items():
        name = clip(str(key), METRIC_NAME_CHARS)
        if isinstance(value, str):
            clean[name] = clip(value, METRIC_TEXT_CHARS)
        elif value is None or isinstance(value, (bool, int, float)):
            clean[name] = value
        else:
            try:
                clean[name] = float(value)   # numpy.float32, torch scalar tensors, ...
            except (TypeError, ValueError):
                raise TypeError(f"metric {name!r} must be a number or a string, got "
                                f"{type(value).__name__}") from None
    return clean


def metrics_of_return(value: Any) -> tuple[dict[str, Any], float | None]:
    """What an objective returned, as ``(metrics, objective value or None)``.

    A mapping is the trial's metrics; one number is the objective's value itself.
    """
    if isinstance(value, Mapping):
        return clean_metrics(value), None
    if value is None:
        return {}, None
    if isinstance(value, bool):
        raise TypeError("the objective returned a bool; return a number or a mapping of metrics")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"the objective returned {type(value).__name__}; return a number or a "
                        "mapping of metrics such as {'accuracy': 0.9, 'loss': 0.3}") from None
    return {}, number
