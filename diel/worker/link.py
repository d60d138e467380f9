"""One trial's line to the search, on the worker rank: what a runner asks of the tuple space.

:class:`TrialLink` puts the trial's epoch reports and reads the master's order
(continue, prune, pause): at one of the trial's decision points (its task's ``decides``,
:class:`~diel.search.protocol.DecisionPoints`: a halving rung, an epoch past the median
rule's warm-up) it waits for the master's answer to that very report, without spinning
(a blocking take on the tuple space, up to :data:`ANSWER_WAIT` s, or for as long as it
takes once the master says it holds the answer: synchronous pbt's generation,
:func:`~diel.search.protocol.hold`), so that a trial pruned at a rung trains no epoch past it; elsewhere it takes an order already there, if
any, and goes on. Once a checkpoint is durable it puts the ``checkpoint`` report
(never before). When the trial ends ``paused`` (it resumes later, in this job when a
scheduler promotes it) the bytes of its latest durable checkpoint go to the tuple
space's distributed store under :func:`~diel.search.protocol.checkpoint_tag`
(replacing the trial's older copy there), checked against its checksum on the way in,
so that its resume is served from memory. A resume on the node of the tuple server
holding the copy maps the server's memory file (copy on write: no copy of the bytes;
:meth:`TrialLink.memory_image` in the rank, :meth:`TrialLink.memory_copy` for an isolated
child, which gets the file's descriptor and maps it itself); elsewhere the copy is received
into an array, or into a memory file of the rank's for an isolated child. Either way the
reader checks its layout and that it is the checkpoint recorded (not the pass over its
bytes, done when it was put), without a further copy. A trial
that trains on never needs its copy, so its checkpoints cost the rank no copy while it
runs (a copy of 100 MB costs the rank's thread about half a second), except in
population-based training (a task's ``checkpoint_every``): there every durable
checkpoint is kept in the space as it comes, and a member that exploits another reads
the donor's copy (``restore``'s ``trial``) without taking it.

The tuple-space client serves one thread: a link is used only on the rank's own thread
(an isolated runner's loop, a program runner's loop, a trial in the rank at its reports).
Checkpoints the rank writes itself (a trial in the rank, a program's folder) go through
the rank's :class:`RankWriter`, whose writer thread only queues what became of each
write; the rank's thread handles the queue at the trial's next report and before its
result (:meth:`TrialLink.finish`), so a trial's durable checkpoints are reported before
its result. An isolated child writes its own and tells the rank over its pipe.
"""

from __future__ import annotations

import logging
import mmap
import os
import queue
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from diel.checkpoints import CorruptCheckpoint, DurableWriter, Written, unpack
from diel.limits import LOG_TEXT_CHARS, clip
from diel.search.distributions import disagreement
from diel.search.protocol import DecisionPoints, checkpoint_report, checkpoint_tag, \
    declared_tag, is_go_on, is_hold, prune_tag, report_tag, suggest_report, suggestion_tag
from diel.worker.trial import GO, SuggestFailed, order_of
from tuplespace import TupleSpaceError

if TYPE_CHECKING:   # NumPy is imported where a checkpoint's copy is handled, not before
    import numpy as np

__all__ = ["TrialLink", "RankWriter", "WorkerSpace", "WriteFailed", "CheckpointEvent",
           "DURABLE_WAIT", "ANSWER_WAIT", "SUGGEST_WAIT"]

log = logging.getLogger("diel.worker")

#: Seconds a trial's end waits for its checkpoints to be durable before its result goes
#: (a slow parallel file system); later ones are still reported once durable.
DURABLE_WAIT = 120.0
#: Seconds a report at a decision point waits for the master's answer (a master busy
#: with a slow proposal); then the trial goes on, and a late order takes effect at a
#: later report.
ANSWER_WAIT = 60.0
#: Seconds a ``suggest_*`` call for an undeclared parameter waits for the master's
#: answer (a master busy with a slow proposal); then the trial fails, saying so.
SUGGEST_WAIT = 300.0


class WorkerSpace(Protocol):
    """The part of the tuple-space client a worker uses."""

    def tput(self, tag: str, value: Any) -> None: ...
    def tget(self, tag: str, timeout: float | None = None) -> Any: ...
    def try_tget(self, tag: str) -> Any: ...
    def tread(self, tag: str, timeout: float | None = None) -> Any: ...
    def dist_tput(self, tag: str, array: np.ndarray) -> None: ...
    def dist_tget(self, tag: str, timeout: float | None = None, out: np.ndarray | None = None) -> Any: ...
    def dist_tread(self, tag: str, timeout: float | None = None, out: np.ndarray | None = None) -> Any: ...
    def dist_open(self, tag: str, timeout: float | None = None) -> int | None: ...


@dataclass(frozen=True)
class WriteFailed:
    """A checkpoint of ``step`` that could not be made durable; ``reason``: one line
    naming the file and why. The trial goes on, and its previous durable checkpoint
    stays the one to resume from."""

    step: int
    reason: str


#: What became of a checkpoint a trial took: durable, or not written.
CheckpointEvent = Written | WriteFailed


class RankWriter:
    """The rank's :class:`~diel.checkpoints.DurableWriter` for the study's checkpoint
    ``folder``, and what became of its writes, waiting for the rank's thread."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.writer = DurableWriter(folder)
        self._events: queue.SimpleQueue[tuple[TrialLink, CheckpointEvent]] = queue.SimpleQueue()

    def checkpoint(self, link: TrialLink, step: int, state: Any) -> None:
        """Serialize ``state`` and have it written as ``link``'s trial's checkpoint of
        ``step`` (:meth:`~diel.checkpoints.DurableWriter.checkpoint`)."""
        self.writer.checkpoint(link.number, step, state,
                               lambda written: self._events.put((link, written)),
                               lambda _, step, reason: self._events.put((link, WriteFailed(step, reason))))

    def handle(self) -> None:
        """On the rank's thread: tell each trial what became of its writes so far."""
        while True:
            try:
                link, event = self._events.get_nowait()
            except queue.Empty:
                return
            link.checkpointed(event)

    def flush(self, timeout: float) -> bool:
        """At a trial's end: wait up to ``timeout`` s for every write, then :meth:`handle`;
        False if some are still under way (they are handled at a later call). The memory
        the writer kept for the trial's next checkpoint is given back."""
        done = self.writer.end_trial(timeout)
        self.handle()
        return done

    def close(self, timeout: float) -> None:
        """At the worker's end: finish the writes (within ``timeout`` s) and handle them."""
        self.writer.close(timeout)
        self.handle()


class TrialLink:
    """Trial ``number`` of ``study``, run by worker copy ``copy`` since ``started``
    (``time.perf_counter()``), over ``space``; ``writer``: where the checkpoints this
    rank writes for it go (None: the worker has no checkpoint folder); ``resumed``: the
    attempt resumes from a checkpoint, so the space may hold the trial's copy (kept when
    it was paused). Only then does ending it ask the space to drop a copy: a round trip
    to the space for every trial was a third of the no-op dispatch rate. ``decides``:
    the epochs whose reports wait for the master's answer (None: none do); ``timeout``:
    the trial's (seconds from ``started``; None: none), which ends a held wait."""

    def __init__(self, space: WorkerSpace, study: str, copy: int, number: int,
                 started: float, writer: RankWriter | None = None,
                 resumed: bool = False, decides: DecisionPoints | None = None,
                 source: int | None = None, keep_copies: bool = False,
                 timeout: float | None = None) -> None:
        self.space, self.study, self.copy, self.number = space, study, copy, number
        self.started, self.writer = started, writer
        self.copy_tag = checkpoint_tag(study, number)
        # the copy a resume reads: the trial's own, or an exploited donor's (read, not taken)
        self.source_tag = checkpoint_tag(study, number if source is None else source)
        self.latest: Written | None = None   # its newest durable checkpoint, once one is
        self.copy_kept = resumed   # the space may hold a copy of the trial's
        self.kept_step: int | None = None   # the step of the copy this run put there
        self.keep_copies = keep_copies
        self.decides = decides
        self.timeout = timeout
        self._declared: dict[str, Any] | None = None   # the space's, once a suggest_* reads it

    def report(self, step: int, metrics: dict[str, Any]) -> str:
        """Put the epoch report of ``step`` (after the reports of the checkpoints made
        durable since the last one); the master's order: ``"go"``, ``"prune"`` or
        ``"pause"`` (:func:`~diel.worker.trial.order_of`), its answer to this report at a
        decision point, else whatever it ordered since the last report."""
        if self.writer is not None:
            self.writer.handle()
        self.space.tput(report_tag(self.study), {
            "kind": "epoch", "trial": self.number, "epoch": step, "worker": self.copy,
            "metrics": {"time": time.perf_counter() - self.started, **metrics}})
        tag = prune_tag(self.study, self.number)
        if self.decides is None or not self.decides.includes(step):
            return order_of(self.space.try_tget(tag))   # a stale go-on reads as go
        deadline: float | None = time.monotonic() + ANSWER_WAIT
        while True:
            wait = self._held_wait() if deadline is None else \
                max(0.0, deadline - time.monotonic())
            try:
                answer = self.space.tget(tag, timeout=wait)
            except TimeoutError:
                if deadline is None:   # held: its generation trains on
                    if self._held_wait() > 0:
                        continue
                    return GO   # the trial's timeout came: it ends at its next report
                log.warning("trial %d: no answer from the search master to the report of step "
                            "%d within %g s; the trial goes on", self.number, step, ANSWER_WAIT)
                return GO
            if is_hold(answer):
                if answer["hold"] == step:   # the answer comes when its generation is decided
                    deadline = None
                continue   # else a hold a report stopped waiting for in vain
            if not is_go_on(answer):
                return order_of(answer)   # an order: this report's, or one not yet taken
            if answer["go"] == step:
                return GO
            # a go-on a report waited for in vain: not this report's answer

    def _held_wait(self) -> float:
        """Seconds a held report waits before it takes again: :data:`ANSWER_WAIT`, or
        less when the trial's timeout comes first (0: it has come)."""
        if self.timeout is None:
            return ANSWER_WAIT
        return max(0.0, min(ANSWER_WAIT, self.started + self.timeout - time.perf_counter()))

    def suggest(self, name: str, distribution: dict[str, Any], params: dict[str, Any]) -> Any:
        """The value of a ``trial.suggest_*`` call for ``name`` with ``distribution``
        (diel's JSON form); ``params``: the trial's. A parameter the search's space
        declares (its declarations are read from the space once per trial, on the first
        call) is checked against its declaration and taken from ``params``; any other
        is asked of the master: a ``suggest`` report, then a blocking take of its answer
        (one round trip, no polling). :class:`SuggestFailed` for a call that disagrees
        with the declaration, a declared parameter inactive in this trial, or the
        master's refusal."""
        if self._declared is None:
            try:
                self._declared = self.space.tread(declared_tag(self.study), timeout=0)
            except TimeoutError:   # a master of the user's own: nothing is declared
                self._declared = {}
        declared = self._declared.get(name)
        if declared is not None:
            reason = disagreement(name, declared["forms"], declared["text"], distribution)
            if reason is None and name not in params:
                reason = (f"trial.suggest_* for {name!r}: {name} is declared with when: "
                          f"{declared['when']}, which this trial's parameters do not meet; "
                          "suggest it only where its condition holds")
            if reason is not None:
                raise SuggestFailed(reason)
            return params[name]
        self.space.tput(report_tag(self.study),
                        suggest_report(self.number, self.copy, name, distribution))
        try:
            answer = self.space.tget(suggestion_tag(self.study, self.number),
                                     timeout=SUGGEST_WAIT)
        except TimeoutError:
            raise SuggestFailed(f"trial.suggest_* for {name!r}: no answer from the search "
                                f"master within {SUGGEST_WAIT:g} s") from None
        if "error" in answer:
            raise SuggestFailed(answer["error"])
        return answer["value"]

    def save(self, step: int, state: Any) -> None:
        """Serialize ``state`` and have it written durably as the checkpoint of ``step``,
        in the background; it is reported once durable (:meth:`checkpointed`)."""
        if self.writer is None:
            raise RuntimeError(f"trial {self.number}: this worker has no checkpoint folder")
        self.writer.checkpoint(self, step, state)

    def finish(self, paused: bool) -> None:
        """At the trial's end, before its result: report its checkpoints, waiting up to
        :data:`DURABLE_WAIT` s for those still being written. A ``paused`` trial's
        latest durable checkpoint is copied into the space for its resume; any other
        trial's copy (kept when it was paused before) is dropped."""
        if self.writer is not None and not self.writer.flush(DURABLE_WAIT):
            log.warning("trial %d: a checkpoint is still being written %g s after the trial "
                        "ended; it is reported once durable", self.number, DURABLE_WAIT)
        if paused and self.latest is not None and self.kept_step != self.latest.step:
            self._keep_copy(self.latest)
        elif not paused:
            self.drop_copy()

    def checkpointed(self, event: CheckpointEvent) -> None:
        """A checkpoint is durable: tell the master (and remember it as the one to keep
        in memory should the trial end paused; with ``keep_copies``, population-based
        training, kept there at once, before the report, so that a member exploiting this
        trial finds it). Or it could not be written: say so in the log (the trial goes
        on)."""
        if isinstance(event, WriteFailed):
            log.warning("trial %d: %s; its previous checkpoint stays the one to resume from",
                        self.number, clip(event.reason, LOG_TEXT_CHARS))
            return
        if self.keep_copies and (self.latest is None or event.step >= self.latest.step):
            self._keep_copy(event)
        self.space.tput(report_tag(self.study), checkpoint_report(
            self.number, self.copy, event.step, event.path, event.nbytes, event.checksum))
        if self.latest is None or event.step >= self.latest.step:
            self.latest = event

    def _keep_copy(self, written: Written) -> None:
        """Put the file's bytes (just written: read from the page cache into the array the
        space sends) in the distributed store, in place of the trial's older copy. They
        are checked against their checksum here, once, so that whoever reads the copy
        (a resume, every member that exploits this trial) skips that pass over them."""
        import numpy as np

        try:
            data = np.fromfile(written.path, dtype=np.uint8)
            unpack(data, written.checksum, written.path)
        except (OSError, CorruptCheckpoint) as e:
            reason = e.problem if isinstance(e, CorruptCheckpoint) else e.strerror or str(e)
            log.warning("trial %d: checkpoint %s is not kept in memory: %s", self.number,
                        written.path, clip(reason, LOG_TEXT_CHARS))
            return
        self.drop_copy()
        try:
            self.space.dist_tput(self.copy_tag, data)
            self.copy_kept, self.kept_step = True, written.step
        except TupleSpaceError as e:   # a chunk over max_message_bytes: the file serves
            log.warning("trial %d: checkpoint %s is not kept in memory: %s", self.number,
                        written.path, clip(str(e), LOG_TEXT_CHARS))

    def drop_copy(self) -> None:
        """Take the trial's copy out of the space (a newer one replaces it, or the trial
        ended and needs none), when it may hold one."""
        if not self.copy_kept:
            return
        try:
            self.space.dist_tget(self.copy_tag, timeout=0)
        except TimeoutError:
            pass   # none kept
        self.copy_kept, self.kept_step = False, None

    def memory_image(self, nbytes: int) -> np.ndarray | None:
        """The space's copy of the trial's latest checkpoint, for a resume in this rank:
        a private map of the tuple server's memory file on this node (no copy; the
        trial may change the arrays loaded from it, the copy stays as it was), else
        received into a new array; None when the space holds none of ``nbytes`` bytes.
        Whoever reads it checks its checksum."""
        try:
            image = self.space.dist_tread(self.source_tag, timeout=0)
        except (TimeoutError, TupleSpaceError):
            return None   # none kept, or taken meanwhile
        return image if image.dtype.itemsize == 1 and image.size == nbytes else None

    def memory_copy(self, nbytes: int) -> int | None:
        """A file descriptor holding the space's copy of the trial's latest checkpoint,
        for an isolated child (which has no MPI) to map privately: the tuple server's
        own memory file when it is on this node (no copy), else a memory file
        (``memfd``) of the rank's, received into; None when the space holds none of
        ``nbytes`` bytes. The caller closes it; whoever reads it checks its checksum."""
        import numpy as np

        try:
            shared = self.space.dist_open(self.source_tag, timeout=0)
        except (TimeoutError, TupleSpaceError):
            return None   # none kept, or taken meanwhile
        if shared is not None:
            if os.fstat(shared).st_size == nbytes:
                return shared
            os.close(shared)
            return None   # another checkpoint's copy
        fd = os.memfd_create(f"diel-checkpoint-{self.number}", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, nbytes)
            with mmap.mmap(fd, nbytes) as mapped:
                found = self._receive(np.frombuffer(mapped, np.uint8))
        except (OSError, ValueError):
            found = False
        if not found:
            os.close(fd)
            return None
        return fd

    def _receive(self, into: np.ndarray) -> bool:
        """Read the space's copy into ``into``; False when none of its size is kept
        (another checkpoint's), or it was taken meanwhile. Nothing here refers to
        ``into`` once this returns (a memory map cannot close while an array uses it)."""
        try:
            self.space.dist_tread(self.source_tag, timeout=0, out=into)
        except (TimeoutError, ValueError, TupleSpaceError):
            return False   # handled here, so the error's frames (holding ``into``) are gone
        return True
