"""The ``trial`` object a user's objective function receives, and how a trial ends early.

``objective(trial)`` reads ``trial.params``, trains, calls ``trial.report(step, **metrics)``
after each epoch (True means stop now: the master pruned the trial, or asked it to pause)
and returns a mapping of metrics or one number. A trial that keeps its progress calls
``trial.restore()`` at its start and ``trial.checkpoint(state)`` after each report.
Everything else (tasks, tags, isolation, timeouts, where checkpoints are written) is the
worker's business, so the same function runs in an isolated child, in the MPI rank itself
or in a test with a hand-made ``Trial``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from diel.checkpoints import take
from diel.errors import DielError
from diel.limits import METRIC_NAME_CHARS, METRIC_TEXT_CHARS, METRICS_PER_REPORT, clip

__all__ = ["Trial", "TrialPruned", "TrialTimedOut", "Reporter", "Checkpointer", "Restorer",
           "GO", "PRUNE", "PAUSE", "order_of", "clean_metrics", "metrics_of_return"]

GO, PRUNE, PAUSE = "go", "prune", "pause"   # the master's answers to a report

#: ``reporter(step, metrics) -> order``: what the worker does with one report, and the
#: master's answer: :data:`GO`, :data:`PRUNE` or :data:`PAUSE` (as :func:`order_of` reads it).
Reporter = Callable[[int, dict[str, Any]], Any]
#: ``checkpointer(step, state)``: serialize ``state`` and have it written durably.
Checkpointer = Callable[[int, Any], None]
#: ``restorer() -> (step, state) | None``: the checkpoint this attempt resumes from.
Restorer = Callable[[], tuple[int, Any] | None]


def order_of(answer: Any) -> str:
    """A reporter's answer as an order: ``"pause"`` is :data:`PAUSE`; ``True``, ``"stop"``
    and ``"prune"`` are :data:`PRUNE` (a prune order on the prune tag is ``True``); anything
    else, ``False`` and ``None`` included, is :data:`GO`."""
    if answer == PAUSE:
        return PAUSE
    return PRUNE if answer is True or answer in ("stop", PRUNE) else GO


class TrialPruned(DielError):
    """Raise from an objective function to stop a pruned trial (returning works too)."""


class TrialTimedOut(DielError):
    """Raised by ``trial.report`` once the trial has run past its timeout."""


@dataclass
class Trial:
    """One trial as the user's function sees it.

    ``params``: the sampled parameters, over the worker's fixed ``params`` setting;
    ``number``: the trial number in the study; ``study``: the study name; ``copy`` and
    ``rank``: which worker copy and which rank of it runs this call; ``comm``: the copy's
    communicator when a trial spans several ranks (``size > 1``), else None;
    ``device``: the GPU index this rank should use (CUDA numbering as this process sees
    it), or None without a GPU.

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
    _reporter: Reporter | None = field(default=None, repr=False)
    _checkpointer: Checkpointer | None = field(default=None, repr=False)
    _restorer: Restorer | None = field(default=None, repr=False)
    _order: str = field(default=GO, repr=False)
    last_step: int = 0
    last_metrics: dict[str, Any] = field(default_factory=dict)

    def report(self, step: int, **metrics: Any) -> bool:
        """Report the metrics of ``step`` (an epoch); True when the trial should stop now:
        the master pruned it, or asked it to pause (:attr:`should_checkpoint`).

        The master sees every report (early stopping, curves in the database). Raises
        :class:`TrialTimedOut` once the trial is past its timeout, so a function that
        reports regularly stops cleanly; on every rank of the copy at the same step.
        Once a report says stop, later ones say so too without asking the master again.
        """
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

    @property
    def should_prune(self) -> bool:
        """True once a report was answered with a prune order."""
        return self._order == PRUNE

    @property
    def should_checkpoint(self) -> bool:
        """True once the master asked this trial to keep its progress and stop (a
        wall-time stop, a scheduler that pauses it): checkpoint, then return. The trial
        is recorded ``paused`` and its next attempt resumes from its checkpoint."""
        return self._order == PAUSE


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
