"""Deciding who holds a study's lease, the same way in every storage.

A storage keeps the lease (one row a study: who, since when, the last heartbeat) and
reads and writes it under its own lock; what to make of the holder it finds is decided
here, so that every storage takes over a stale lease and refuses a live one alike (see
:mod:`diel.results._storage` for the contract): a holder whose heartbeat is older than
:data:`STALE_AFTER_S` is dead or hung; one on this host whose process is gone is dead once
its heartbeat has not moved for two heartbeat periods (a process of the same host name in
another PID namespace proves it is alive by beating meanwhile).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
import socket
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable

from diel.errors import StudyBusy
from diel.procfs import process_stat
from diel.results._storage import HEARTBEAT_S, STALE_AFTER_S, Lease, utcnow

__all__ = ["Holder", "acquire", "decide", "lost", "as_utc", "HOST"]

HOST = socket.gethostname()
log = logging.getLogger("diel.results")


@dataclass(frozen=True)
class Holder:
    """Another run's lease as this run finds it: who, since when, how old its heartbeat
    is, and how long to wait before a holder that seems dead can be judged."""

    host: str
    pid: int
    started_at: datetime
    age_s: float
    wait_s: float = 0.0

    def busy(self, study: str) -> str:
        """The one line of :class:`StudyBusy`."""
        return (f"study {study!r} is being run by host {self.host} pid {self.pid} since "
                f"{self.started_at:%Y-%m-%d %H:%M:%S} UTC (heartbeat {self.age_s:.0f} s ago); "
                "wait for it to end or stop it (a run that died frees the study "
                f"{STALE_AFTER_S:g} s after its last heartbeat)")


def acquire(study: str, take: Callable[[Lease], Holder | None]) -> Lease:
    """A new lease of ``study`` for this process, taken by ``take`` (the storage's: take
    the lease when free or stale, else return its live holder); a holder on this host
    that is gone but beat recently is waited for once; :class:`StudyBusy` when the lease
    stays held."""
    lease = Lease(study, secrets.token_hex(16), HOST, os.getpid(), utcnow())
    holder = take(lease)
    if holder is not None and holder.wait_s:   # on this host and gone: let it age
        time.sleep(holder.wait_s)
        holder = take(lease)
    if holder is not None:
        raise StudyBusy(holder.busy(study))
    return lease


def decide(study: str, holder: Holder) -> Holder | None:
    """What to do with the lease ``holder`` holds: None when it is stale and may be taken
    over (said in a WARNING naming the holder), else the live holder, with how long to
    wait before judging it again when it seems dead."""
    stale, wait_s = _judge(holder)
    if stale is None:
        return dataclasses.replace(holder, wait_s=wait_s)
    log.warning("taking over the lease of study %r from host %s pid %d (%s)", study,
                holder.host, holder.pid, stale)
    return None


def lost(study: str, holder: Holder | None) -> StudyBusy:
    """The error of a heartbeat that found its lease gone: taken over by ``holder``, or
    released (None)."""
    who = (f"host {holder.host} pid {holder.pid} took it over" if holder
           else "it was released by another process")
    return StudyBusy(f"study {study!r}: this run lost its lease ({who} while this run's "
                     "heartbeat stalled); it stops writing to the study")


def _judge(holder: Holder) -> tuple[str | None, float]:
    """Why the holder's lease is stale (None: alive), and for a holder on this host whose
    process is gone but whose heartbeat is recent, how long until it can be judged."""
    if holder.age_s > STALE_AFTER_S:
        return f"no heartbeat for {holder.age_s:.0f} s", 0.0
    if holder.host != HOST or not _gone(holder.pid):
        return None, 0.0
    settle = 2 * HEARTBEAT_S   # a live holder in another PID namespace beats meanwhile
    if holder.age_s >= settle:
        return f"its process is gone; last heartbeat {holder.age_s:.0f} s ago", 0.0
    return None, settle - holder.age_s


def _gone(pid: int) -> bool:
    """True when no process ``pid`` runs on this host (a zombie counts as gone)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:   # another user's process: alive
        return False
    found = process_stat(pid)
    return found is not None and found.state == "Z"


def as_utc(moment: datetime) -> datetime:
    """``moment`` as an aware UTC datetime (SQLite gives back naive ones)."""
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else \
        moment.astimezone(timezone.utc)
