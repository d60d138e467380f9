"""Function trials in the worker's own ranks (``isolate: false``, or a copy of several ranks).

Every rank of the copy calls the function for the same trial (``trial.comm`` is the
copy's communicator). Rank 0 alone talks to the search; at each ``trial.report`` it
decides (go on, pruned, or past the timeout) and tells the other ranks, which wait for
that word in the same ``report`` call. So a prune, a pause or a timeout ends the trial on
every rank at the same step and no rank is left alone in a collective.

Checkpoints: rank 0's ``trial.checkpoint`` serializes the state and hands it to the
rank's writer (the other ranks' calls return at once); ``trial.restore`` is called by
every rank: rank 0 reads the checkpoint (the tuple space's copy, else the file) and
sends it to the others, point to point, each waiting without spinning.

``trial.suggest_*``: rank 0 gets the value (the declared one, or the master's answer:
:meth:`~diel.worker.link.TrialLink.suggest`) and sends it to the other ranks, which
wait for it in the same call, so every rank trains with the same parameters.

A trial that neither returns nor reports cannot be stopped inside a rank. Past its
timeout plus the grace period the job is ended on purpose, with a message saying so,
rather than left hanging; the trial's attempt is counted, and ``isolate: true`` (one
rank per trial) is the way to let a search survive such trials.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from diel.checkpoints import Snapshot
from diel.checkpoints.snapshot import buffer_offsets
from diel.worker.link import TrialLink
from diel.worker.outcome import TrialOutcome, run_objective, timed_out
from diel.worker.resume import resume_point
from diel.worker.trial import GO, PAUSE, PRUNE, Checkpointer, Restorer, SuggestFailed, \
    Suggester, Trial, TrialTimedOut
from tuplespace.backoff import wait_for, wait_until

__all__ = ["InProcessRunner", "TASK_TAG", "DECISION_TAG", "RESTORE_TAG", "SUGGEST_TAG"]

TASK_TAG = 7       # rank 0 hands each trial to the other ranks of its copy (None: stop)
DECISION_TAG = 8   # rank 0's answer to each report: "go", "prune", "pause" or the timeout text
RESTORE_TAG = 9    # rank 0's restored checkpoint: (step, stream, lengths) or None, then its block
SUGGEST_TAG = 10   # rank 0's answer to each suggest_*: (True, value) or (False, why it failed)

log = logging.getLogger("diel.worker")


class InProcessRunner:
    """Runs ``function`` in this rank; ``comm`` is the copy's communicator (None: one rank)."""

    def __init__(self, function: Callable[[Trial], Any], comm: Any = None, grace: float = 5.0,
                 on_hang: Callable[[str], None] | None = None) -> None:
        self.function, self.comm, self.grace = function, comm, grace
        self.on_hang = on_hang or _end_the_job
        self.size = 1 if comm is None else comm.Get_size()
        self.rank = 0 if comm is None else comm.Get_rank()

    # -- rank 0 ----------------------------------------------------------------
    def run(self, info: dict[str, Any], link: TrialLink, timeout: float | None) -> TrialOutcome:
        """Rank 0: hand the trial to the other ranks, run it, return its outcome."""
        for rank in range(1, self.size):
            self.comm.send((info, timeout), dest=rank, tag=TASK_TAG)
        deadline = None if timeout is None else time.monotonic() + timeout

        def decide(step: int, metrics: dict[str, Any]) -> str:
            if deadline is not None and time.monotonic() >= deadline:
                decision = timed_out(timeout or 0)
            else:
                decision = link.report(step, metrics)
            for rank in range(1, self.size):
                self.comm.send(decision, dest=rank, tag=DECISION_TAG)
            return decision

        def checkpoint(step: int, state: Any) -> None:
            link.save(step, state)

        def restore() -> tuple[int, Any] | None:
            found = resume_point(info.get("restore"), info["number"], link.memory_image,
                                 log.warning)
            self._send_restored(found)
            return None if found is None else (found[0], found[1].load())

        def suggest(name: str, distribution: dict[str, Any], params: dict[str, Any]) -> Any:
            try:
                answer = (True, link.suggest(name, distribution, params))
            except SuggestFailed as e:
                answer = (False, str(e))
            for rank in range(1, self.size):
                self.comm.send(answer, dest=rank, tag=SUGGEST_TAG)
            return _suggested(answer)

        return self._execute(info, decide, timeout, checkpoint, restore, suggest)

    def _send_restored(self, found: tuple[int, Snapshot] | None) -> None:
        """Rank 0: the restored checkpoint to every other rank of the copy (sent without
        blocking, then waited for without spinning: a rank may call restore() later)."""
        head = None if found is None else (found[0], bytes(found[1].header), found[1].lengths)
        requests = []
        for rank in range(1, self.size):
            requests.append(self.comm.isend(head, dest=rank, tag=RESTORE_TAG))
            if found is not None:
                requests.append(self.comm.Isend(found[1].block, dest=rank, tag=RESTORE_TAG))
        wait_until(lambda: all(request.Test() for request in requests))

    def stop_followers(self) -> None:
        """Rank 0, at the end: tell the other ranks there are no more trials."""
        for rank in range(1, self.size):
            self.comm.send(None, dest=rank, tag=TASK_TAG)

    # -- ranks 1.. -------------------------------------------------------------
    def follow(self) -> int:
        """Ranks other than 0: run each trial rank 0 hands over, until it says stop."""
        comm, served = self.comm, 0
        while (task := wait_for(lambda: comm.improbe(source=0, tag=TASK_TAG)).recv()) is not None:
            info, timeout = task

            def decide(step: int, metrics: dict[str, Any]) -> str:
                return wait_for(lambda: comm.improbe(source=0, tag=DECISION_TAG)).recv()

            def suggest(name: str, distribution: dict[str, Any], params: dict[str, Any]) -> Any:
                return _suggested(wait_for(lambda: comm.improbe(source=0, tag=SUGGEST_TAG)).recv())

            outcome = self._execute(info, decide, timeout, lambda step, state: None,
                                    self._receive_restored, suggest)
            if outcome.status == "failed":
                log.warning("trial %d failed on rank %d of its copy: %s", info["number"],
                            self.rank, outcome.error)
            served += 1
        return served

    def _receive_restored(self) -> tuple[int, Any] | None:
        """Ranks other than 0: the checkpoint rank 0 restored, or None."""
        comm = self.comm
        head = wait_for(lambda: comm.improbe(source=0, tag=RESTORE_TAG)).recv()
        if head is None:
            return None
        step, stream, lengths = head
        import numpy as np   # only where a checkpoint is restored: a rank starts without it

        block = np.empty(buffer_offsets(lengths)[1], np.uint8)
        wait_for(lambda: comm.improbe(source=0, tag=RESTORE_TAG)).Recv(block)
        return step, Snapshot(stream, block, lengths).load()

    # -- both ------------------------------------------------------------------
    def _execute(self, info: dict[str, Any], decide: Callable[[int, dict[str, Any]], str],
                 timeout: float | None, checkpoint: Checkpointer,
                 restore: Restorer, suggest: Suggester) -> TrialOutcome:
        def reporter(step: int, metrics: dict[str, Any]) -> str:
            decision = decide(step, metrics)
            if decision not in (GO, PRUNE, PAUSE):
                raise TrialTimedOut(decision)
            return decision

        trial = Trial(params=dict(info["params"]), number=info["number"], study=info["study"],
                      copy=info["copy"], rank=self.rank, comm=self.comm if self.size > 1 else None,
                      device=info["device"], checkpoint_every=info.get("checkpoint_every"),
                      _reporter=reporter, _checkpointer=checkpoint,
                      _restorer=restore, _suggester=suggest)
        watchdog = None
        if timeout is not None:
            watchdog = threading.Timer(timeout + self.grace, self.on_hang, args=(
                f"trial {info['number']} is still running past its timeout ({timeout:g} s) "
                f"plus the grace period ({self.grace:g} s); a trial running inside an MPI "
                "rank (isolate: false or size > 1) cannot be stopped alone, so the job ends "
                "here. The trial's attempt is counted: a rerun resumes the study.",))
            watchdog.daemon = True
            watchdog.start()
        try:
            return run_objective(self.function, trial)
        finally:
            if watchdog is not None:
                watchdog.cancel()

    def close(self) -> None:
        """Nothing to release (for symmetry with the other runners)."""


def _suggested(answer: tuple[bool, Any]) -> Any:
    """The value of rank 0's answer to a ``suggest_*``, or its failure raised."""
    if not answer[0]:
        raise SuggestFailed(answer[1])
    return answer[1]


def _end_the_job(message: str) -> None:
    from diel.executive.run import abort   # the executive's way to end every rank at once
    abort("a trial could not be stopped", message)
