"""Interrupts (Ctrl-C's SIGINT, a batch system's SIGTERM) as normal ends of a job.

``mpiexec`` (MPICH's hydra) passes SIGINT and SIGTERM on to every rank. Each rank of
``diel run`` holds them back while the job starts (:func:`hold_signals`: the start's
blocking MPI collectives must be passed by every rank or none), then turns the first
one into :class:`Interrupted` (:func:`raise_on_signals`), which unwinds whatever the
rank was doing and ends it quietly with 130 (SIGINT) or 143 (SIGTERM), the shell's
convention, with no traceback. The search master instead holds signals back
(:func:`deferred`): it notices them between two passes of its loop, or at once while it
waits on the tuple space (whose server rank is gone by then), commits what it has, gives
its lease back, says in one line what will run again, and only then raises
:class:`Interrupted` itself, so no database write is ever cut in half.

No MPI here: the search master imports this module in unit tests too.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from types import FrameType
from typing import Iterator

__all__ = ["Interrupted", "SIGNALS", "hold_signals", "raise_on_signals", "deferred",
           "Deferral"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """The job was asked to stop by signal ``signum``; the rank ends with
    :attr:`exit_status`. A ``KeyboardInterrupt``, so that ``except Exception`` in user
    code or in a trial runner does not swallow it."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")

    @property
    def exit_status(self) -> int:
        """128 + the signal's number, as a shell reports a program ended by it."""
        return 128 + self.signum


def hold_signals() -> Deferral:
    """From now on SIGINT and SIGTERM are only noted in the :class:`Deferral` returned,
    until :func:`raise_on_signals`. For a job's start, whose blocking MPI collectives a
    rank must not leave half-way: the others would wait for it forever."""
    deferral = Deferral()
    for signum in SIGNALS:
        signal.signal(signum, deferral.note)
    return deferral


def raise_on_signals(held: Deferral | None = None) -> None:
    """From now on, the first SIGINT or SIGTERM raises :class:`Interrupted` in the main
    thread; later ones are ignored while the rank unwinds (a second Ctrl-C on the
    terminal is mpiexec's to act on: it kills the job). A signal ``held`` back before
    is raised at once."""
    raised = False

    def handler(signum: int, _frame: FrameType | None) -> None:
        nonlocal raised
        if not raised:
            raised = True
            raise Interrupted(signum)

    for signum in SIGNALS:
        signal.signal(signum, handler)
    if held is not None and held.signum is not None:
        handler(held.signum, None)


class Deferral:
    """Signals held back (:func:`hold_signals`, :func:`deferred`): calling it gives the
    first one noted (None before any). Inside :meth:`raising` a signal raises :class:`Interrupted` at once:
    the place for waits that may never end once the other ranks are gone (the master's
    round trips to the tuple space), never for database writes."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._raising = False

    def __call__(self) -> int | None:
        return self.signum

    def note(self, signum: int, _frame: FrameType | None = None) -> None:
        """The signal handler: note the first signal; raise it inside :meth:`raising`."""
        if self.signum is None:
            self.signum = signum
        if self._raising:
            self._raising = False
            raise Interrupted(self.signum)

    @contextmanager
    def raising(self) -> Iterator[None]:
        """Within the block a signal, or one noted before it, raises :class:`Interrupted`."""
        if self.signum is not None:
            raise Interrupted(self.signum)
        self._raising = True
        try:
            yield
        finally:
            self._raising = False


@contextmanager
def deferred() -> Iterator[Deferral]:
    """Within the block, SIGINT and SIGTERM are only noted in the :class:`Deferral`
    yielded (raised at once only inside its :meth:`~Deferral.raising` blocks). The block
    is expected to act on a noted signal (stop and raise :class:`Interrupted`); one noted
    but not acted on is raised when the block ends normally. The previous handlers come
    back afterwards. Outside the main thread, where Python cannot install handlers,
    signals are left alone and nothing is ever noted.
    """
    if threading.current_thread() is not threading.main_thread():
        yield Deferral()
        return
    previous = {signum: signal.getsignal(signum) for signum in SIGNALS}
    deferral = hold_signals()
    try:
        yield deferral
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
    if deferral.signum is not None:
        raise Interrupted(deferral.signum)
