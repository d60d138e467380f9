"""DurableWriter: one background thread that makes submitted snapshots durable, in order.

A trial's ``checkpoint()`` returns once its state is serialized (:func:`take`); the
write, the fsyncs and the rename (:func:`~diel.checkpoints.files.write`) happen on this
thread while the trial trains on. Each write ends in exactly one callback, called from
the writer's thread: ``on_durable(written)`` once the file is durable, or
``on_failed(key, step, text)`` (``text``: one line naming the file and the system's
reason) when it could not be written: a full disk, an exceeded quota, a folder the
system refuses. A failure never reaches the trial; the previous durable checkpoint
stays the one to resume from.

When training outruns the disk, a snapshot still waiting in the queue is dropped when a
newer one of the same key (the same trial) is submitted: the newer one is written
instead and no callback is made for the dropped one. A snapshot being written is never
dropped.

:meth:`DurableWriter.checkpoint` (what ``trial.checkpoint()`` calls) serializes the state
into memory the writer keeps from the snapshots it has written
(:class:`~diel.checkpoints.pool.BlockPool`): each snapshot is dropped as soon as its file
is written, before its callback, so the trial's next checkpoint copies into memory
already faulted in, and returns once the state is copied, whatever the writer is doing:
it never waits for a write. The writer keeps at most two blocks, each the size of the
state's large buffers (rounded up to 2 MiB): the one being written and the one the next
checkpoint fills; a waiting snapshot of the same trial, which the new one replaces, gives
up its memory to it. So a trial that outruns the disk holds at most two copies of its
state, and the writer keeps them until :meth:`DurableWriter.free_memory` (the worker
calls it at each trial's end) or :meth:`DurableWriter.close`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from diel.checkpoints.files import Written, os_reason, write
from diel.checkpoints.layout import checkpoint_path
from diel.checkpoints.pool import BlockPool
from diel.checkpoints.snapshot import Snapshot, take
from diel.limits import LOG_TEXT_CHARS, clip

__all__ = ["DurableWriter", "OnDurable", "OnFailed"]

log = logging.getLogger("diel.checkpoints")

OnDurable = Callable[[Written], None]
OnFailed = Callable[[int, int, str], None]    # (key, step, one line)


@dataclass
class _Job:
    key: int
    step: int
    snapshot: Snapshot | None    # None once written: its memory may be lent again
    on_durable: OnDurable
    on_failed: OnFailed


class DurableWriter:
    """Writes snapshots to ``<folder>/trial-<key>/step-<step>.ckpt`` on one thread
    (started by the first :meth:`submit`); ``folder`` is the study's checkpoint folder
    (:func:`~diel.checkpoints.layout.study_folder`). Thread-safe."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)
        self._changed = threading.Condition()
        self._waiting: list[_Job] = []      # oldest first
        self._writing: _Job | None = None
        self._closed = False
        self._thread: threading.Thread | None = None
        self.pool = BlockPool()

    def checkpoint(self, key: int, step: int, state: Any, on_durable: OnDurable,
                   on_failed: OnFailed) -> None:
        """:func:`~diel.checkpoints.take` ``state`` into the writer's kept memory and
        :meth:`submit` it (module docstring). Returns once the state is copied (the trial
        may change it at once), without waiting for the writer. TypeError for a state
        that cannot be pickled, naming the value (nothing queued is dropped then);
        RuntimeError once the writer is closed."""
        checkpoint_path(self.folder, key, step)   # checks key and step before any copy

        def memory(nbytes: int) -> Any:
            with self._changed:   # the state pickled: a waiting snapshot of key is superseded
                if self._closed:
                    raise RuntimeError(f"the checkpoint writer of {self.folder} is closed")
                self._drop_waiting(key)
            return self.pool.block(nbytes)

        self.submit(key, step, take(state, memory), on_durable, on_failed)

    def submit(self, key: int, step: int, snapshot: Snapshot, on_durable: OnDurable,
               on_failed: OnFailed) -> None:
        """Queue ``snapshot`` as step ``step`` of trial ``key`` (module docstring: one
        callback per write; an older waiting snapshot of ``key`` is dropped). Returns at
        once; RuntimeError once the writer is closed."""
        checkpoint_path(self.folder, key, step)   # checks key and step now, in the caller
        job = _Job(key, step, snapshot, on_durable, on_failed)
        with self._changed:
            if self._closed:
                raise RuntimeError(f"the checkpoint writer of {self.folder} is closed")
            self._drop_waiting(key)
            self._waiting.append(job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="diel-checkpoint-writer",
                                                daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def _drop_waiting(self, key: int) -> None:
        """Drop the waiting snapshot of ``key``, without a callback (with the lock held)."""
        self._waiting = [queued for queued in self._waiting if queued.key != key]

    def free_memory(self) -> None:
        """Give back the memory kept for the next checkpoint (a trial's end): a block a
        snapshot still uses is freed with that snapshot."""
        self.pool.clear()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every submitted snapshot is written (or failed); False if some are
        still queued or being written after ``timeout`` seconds."""
        self._not_from_a_callback("flush")
        with self._changed:
            return self._changed.wait_for(self._idle, timeout)

    def end_trial(self, timeout: float | None = None) -> bool:
        """At a trial's end: :meth:`flush` (within ``timeout`` seconds; its answer), then
        :meth:`free_memory`, since the memory kept for the trial's next checkpoint has no
        use any more."""
        done = self.flush(timeout)
        self.free_memory()
        return done

    def close(self, timeout: float | None = None) -> bool:
        """Finish the queued writes and stop the thread, within ``timeout`` seconds; True
        when all were done. Snapshots still queued then are not written: ``on_failed``
        says so for each. A write under way goes on to its end (its callback still
        comes) on the thread, which does not keep the process alive."""
        self._not_from_a_callback("close")
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            self._closed = True
            self._changed.notify_all()
            done = self._changed.wait_for(self._idle, timeout)
            left, self._waiting = self._waiting, []
        for job in left:
            job.snapshot = None
            _call(job.on_failed, job.key, job.step,
                  f"checkpoint {checkpoint_path(self.folder, job.key, job.step)}: not written: "
                  f"the writer was closed after {timeout} s with it still queued")
        self.free_memory()
        if self._thread is not None:
            self._thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return done

    def _not_from_a_callback(self, what: str) -> None:
        if threading.current_thread() is self._thread:
            raise RuntimeError(f"DurableWriter.{what}() called from a checkpoint callback "
                               "would wait for itself")

    def _idle(self) -> bool:
        return not self._waiting and self._writing is None

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._waiting or self._closed)
                if not self._waiting:
                    return   # closed, and nothing left to write
                job = self._writing = self._waiting.pop(0)
            self._write(job)   # drops the job's snapshot before its callback
            with self._changed:
                self._writing = None
                self._changed.notify_all()

    def _write(self, job: _Job) -> None:
        """Write the job's snapshot, drop it (its memory may serve the next checkpoint
        from now on: the callback's caller may take one at once), then call back."""
        path = checkpoint_path(self.folder, job.key, job.step)
        snapshot, job.snapshot = job.snapshot, None
        failure = None
        try:
            written = write(snapshot, path, job.step)
        except Exception as e:   # any failure is the trial's lost checkpoint, never its crash
            reason = os_reason(e) if isinstance(e, OSError) else f"{type(e).__name__}: {e}"
            failure = clip(_one_line(f"checkpoint {path}: not written: {reason}"), LOG_TEXT_CHARS)
        del snapshot
        if failure is not None:
            _call(job.on_failed, job.key, job.step, failure)
        else:
            _call(job.on_durable, written)


def _call(callback: Callable[..., None], *args: object) -> None:
    """Call back; a callback that raises is logged, and the writer goes on."""
    try:
        callback(*args)
    except Exception as e:
        log.error("a checkpoint callback (%s) raised %s", getattr(callback, "__qualname__", callback),
                  clip(_one_line(f"{type(e).__name__}: {e}"), LOG_TEXT_CHARS))


def _one_line(text: str) -> str:
    return " ".join(text.splitlines())
