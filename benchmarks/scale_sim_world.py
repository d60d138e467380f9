"""The simulated side of benchmarks/scale_sim.py: N virtual workers on a simulated clock,
seen by the search master through the three tuple-space calls it makes (``tput``,
``tget_many``, ``try_tget``).

The master runs for real, in this process. Between two of its calls to the space it does
real work (engine, sampler, results database); that work's time on the ``cpu`` clock
(``process_time`` by default) advances the master's simulated clock, so the master is one server: while it works,
reports wait. Inside a call, the world moves the workers on to the master's moment (a
heap of epoch and completion events) and answers as the tuple space would then have:

* a task put at master time ``t`` reaches the server at ``t + rtt/2``; a worker asks for
  its next task when it finishes one and starts it a round trip later (half a round trip
  after the task arrived, when it was already waiting);
* a report sent at ``t`` reaches the server at ``t + rtt/2``; ``tget_many`` takes every
  report there (up to its limit) and returns a round trip later, or waits for the first
  report, or times out after its ``timeout`` of simulated time.

Costs charged to the master beyond its measured CPU: ``put_s`` per task put, a round
trip per ``tget_many`` or ``try_tget`` that finds what it asked for at once (a wait for a
report is idle time). The tuple server's own CPU is not queued: its load is reported
(messages in the window times ``server_s``), not simulated. Nothing here imports diel.
"""

from __future__ import annotations

import heapq
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

__all__ = ["Messages", "World", "Figures"]

EPOCH, END = 0, 1   # event kinds; at one instant, epoch reports come before the result


@dataclass(frozen=True)
class Messages:
    """What one tuple-space message costs (seconds; see scale_sim_messages)."""

    put_s: float     # CPU of the caller of one tput (encode and send)
    rtt_s: float     # round trip of a request to the tuple server and back
    server_s: float  # tuple server CPU per request


@dataclass(frozen=True)
class Figures:
    """What one simulation measured. ``window`` is the steady state: from the moment every
    worker has started a trial and as many trials as there are workers have ended (the
    master has had a wave of results to handle), to the moment the master put its last
    task (after it, the master has nothing left to hand out: workers then idle because
    the study is complete, not because of the master); None when there is none (fewer
    trials than workers, a master that queued the whole study before the first wave came
    back, or a window not longer than ``min_window``)."""

    workers: int
    trials: int                  # trials the workers ran
    span: float                  # simulated seconds from the master's start to the last report
    window: tuple[float, float] | None
    utilization: float | None    # busy worker-time / (workers x window)
    master_busy: float | None    # master busy time in the window / window
    master_s_per_trial: float    # master busy time / trials (whole run, idle polling left out)
    passes: int                  # the master's tget_many calls that returned reports
    reports_per_pass: float
    server_load: float | None    # messages in the window x server_s / window


class World:
    """The tuple space and ``workers`` simulated workers, driven by the master's calls.

    ``duration(number)`` gives trial ``number``'s simulated seconds; ``result(task,
    worker, seconds)`` and ``epoch(task, worker, k, seconds)`` build the reports a real
    worker would put; ``epochs`` epoch reports are sent per trial, evenly spaced.
    """

    def __init__(self, workers: int, task_tag: str, report_tag: str,
                 duration: Callable[[int], float],
                 result: Callable[[dict, int, float], dict],
                 epoch: Callable[[dict, int, int, float], dict],
                 messages: Messages, epochs: int = 0,
                 cpu: Callable[[], float] = time.process_time) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.workers, self.task_tag, self.report_tag = workers, task_tag, report_tag
        self.duration, self.result, self.epoch = duration, result, epoch
        self.msg, self.epochs, self.cpu = messages, epochs, cpu
        self.now = 0.0                         # the master's simulated clock
        self.busy_total = 0.0
        self.polling = 0.0        # master CPU in the passes after a tget_many timed out
        self._polled = False
        self.tasks: deque[tuple[float, dict]] = deque()   # (arrival at server, task)
        self.waiting: deque[tuple[int, float]] = deque(
            (w, 0.0) for w in range(workers))   # (worker, time its request reached the server)
        self.events: list[tuple[float, int, int, int, dict, Any]] = []
        self.seq = 0
        self.reports: deque[tuple[float, dict]] = deque()  # (arrival at server, report)
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.first_start = np.full(workers, np.inf)
        self.busy: list[tuple[float, float]] = []   # the master's busy intervals
        self.message_times: list[float] = []
        self.passes = self.taken = self.dispatched = 0
        # (tasks put so far, master busy since the last take, idle polling left out)
        self.pass_log: list[tuple[int, float]] = []
        self._busy_at_take = 0.0
        self.last_report = 0.0
        self.last_put = 0.0       # when the master put its last task
        self._mark = cpu()

    # -- the clock ---------------------------------------------------------------
    def clock(self) -> float:
        """The simulated time, for the master's engine (time budget, progress)."""
        return self.now

    def _enter(self) -> None:
        """The master called the space: charge the CPU it used since its last call (work
        after a ``tget_many`` that timed out is the master's idle polling)."""
        used = self.cpu() - self._mark
        self._charge(used)
        if self._polled and used > 0:
            self.polling += used
        self._polled = False

    def _leave(self) -> None:
        self._mark = self.cpu()

    def _charge(self, seconds: float) -> None:
        if seconds > 0:
            self.busy.append((self.now, self.now + seconds))
            self.now += seconds
            self.busy_total += seconds

    # -- the master's calls ----------------------------------------------------------
    def tput_many(self, tag: str, values: list[Any]) -> None:
        """The master puts a pass's tasks (simulated as that many puts)."""
        for value in values:
            self.tput(tag, value)

    def tput(self, tag: str, value: Any) -> None:
        """The master puts a task (or a stop marker, or a prune order: not simulated)."""
        self._enter()
        self._charge(self.msg.put_s)
        self.message_times.append(self.now)
        if tag == self.task_tag and isinstance(value, dict):
            self.dispatched += 1
            self.last_put = self.now
            self._advance(self.now)
            arrival = self.now + self.msg.rtt_s / 2
            if self.waiting:
                worker, asked = self.waiting.popleft()
                self._start(worker, value, max(asked, arrival) + self.msg.rtt_s / 2)
            else:
                self.tasks.append((arrival, value))
        self._leave()

    def tget_many(self, tag: str, limit: int, timeout: float | None = None) -> list[Any]:
        """Every report already at the server (up to ``limit``), else the first to come."""
        self._enter()
        self.message_times.append(self.now)
        work = self.busy_total - self.polling
        self.pass_log.append((self.dispatched, work - self._busy_at_take))
        self._busy_at_take = work
        taken = self._take(tag, limit, timeout)
        self._leave()
        return taken

    def _take(self, tag: str, limit: int, timeout: float | None) -> list[Any]:
        if tag != self.report_tag:
            raise ValueError(f"the simulated master waits on {tag!r}, not {self.report_tag!r}")
        self._advance(self.now)
        if self.reports:
            self._charge(self.msg.rtt_s)
        else:
            if not self.events:
                if timeout is None:
                    raise RuntimeError("simulation deadlock: the master waits for a report "
                                       "and no worker runs")
                self._time_out(timeout)
            first = self.events[0][0]
            if timeout is not None and first > self.now + timeout:
                self._time_out(timeout)
            self._advance(first)
            self.now = first + self.msg.rtt_s
        self.passes += 1
        taken = [self.reports.popleft()[1] for _ in range(min(limit, len(self.reports)))]
        self.taken += len(taken)
        return taken

    def _time_out(self, timeout: float) -> None:
        self.now += timeout + self.msg.rtt_s
        self._polled = True
        self._leave()
        raise TimeoutError("no report")

    def try_tget(self, tag: str) -> Any:
        """The master takes back a queued task (after a stop rule) or a stale prune order."""
        self._enter()
        self._charge(self.msg.rtt_s)
        self.message_times.append(self.now)
        self._advance(self.now)
        found: Any = None
        if tag == self.task_tag and self.tasks:
            found = self.tasks.popleft()[1]
        self._leave()
        return found

    # -- the workers -----------------------------------------------------------------
    def _start(self, worker: int, task: dict, at: float) -> None:
        seconds = self.duration(task["trial"])
        self.starts.append(at)
        self.ends.append(at + seconds)
        self.first_start[worker] = min(self.first_start[worker], at)
        for k in range(1, self.epochs + 1):   # the last one exactly at the end, before the result
            elapsed = seconds if k == self.epochs else seconds * k / self.epochs
            self._push(at + elapsed, EPOCH, worker, task, (k, elapsed))
        self._push(at + seconds, END, worker, task, seconds)

    def _push(self, at: float, kind: int, worker: int, task: dict, data: Any) -> None:
        self.seq += 1
        heapq.heappush(self.events, (at, kind, self.seq, worker, task, data))

    def _advance(self, until: float) -> None:
        """Run every worker event up to simulated time ``until``."""
        half = self.msg.rtt_s / 2
        while self.events and self.events[0][0] <= until:
            at, kind, _, worker, task, data = heapq.heappop(self.events)
            if kind == EPOCH:
                k, elapsed = data
                self.message_times.append(at)
                self.reports.append((at + half, self.epoch(task, worker, k, elapsed)))
                continue
            self.message_times.extend((at, at))   # the result put, the request for a task
            self.reports.append((at + half, self.result(task, worker, data)))
            self.last_report = at + half
            if self.tasks:
                arrival, next_task = self.tasks.popleft()
                self._start(worker, next_task, max(at + half, arrival) + half)
            else:
                self.waiting.append((worker, at + half))

    # -- the figures -----------------------------------------------------------------
    def cost_by_study_size(self, bins: int = 8) -> list[tuple[int, float]]:
        """The master's busy seconds per dispatched trial as the study grows: the passes
        after the first (which includes opening the study) and before the last dispatch,
        cut into ``bins`` equal ranges of study size (trials dispatched so far), as (the
        range's middle, seconds per trial). A model-based sampler's proposals cost more
        as its study grows."""
        log = np.asarray(self.pass_log[1:], dtype=float).reshape(-1, 2)
        if len(log) < 2:
            return []
        sizes, costs = log[1:, 0], log[1:, 1]
        tasks = np.diff(log[:, 0])
        growing = sizes < sizes.max()   # after the last dispatch the study no longer grows
        sizes, costs, tasks = sizes[growing], costs[growing], tasks[growing]
        if len(sizes) < 2:
            return []
        edges = np.linspace(sizes[0], sizes[-1], bins + 1)
        groups = []
        for low, high in zip(edges[:-1], edges[1:]):
            inside = (sizes >= low) & ((sizes < high) | (high == edges[-1]))
            if tasks[inside].sum() > 0:
                groups.append((int((low + high) / 2), float(costs[inside].sum() / tasks[inside].sum())))
        return groups

    def figures(self, min_window: float = 0.0) -> Figures:
        """What the run measured (call once the master has returned)."""
        starts, ends = np.asarray(self.starts), np.asarray(self.ends)
        trials = len(starts)
        window = None
        if trials > self.workers and np.isfinite(self.first_start).all():
            a = max(float(self.first_start.max()), float(np.sort(ends)[self.workers - 1]))
            b = self.last_put
            if b - a > max(min_window, 0.0):
                window = (a, b)
        utilization = master_busy = server_load = None
        if window is not None:
            a, b = window
            width = b - a
            worked = np.clip(np.minimum(ends, b) - np.maximum(starts, a), 0, None).sum()
            utilization = min(1.0, float(worked / (self.workers * width)))   # 1 + rounding
            spans = np.asarray(self.busy).reshape(-1, 2)
            master = np.clip(np.minimum(spans[:, 1], b) - np.maximum(spans[:, 0], a), 0, None).sum()
            master_busy = min(1.0, float(master / width))
            times = np.asarray(self.message_times)
            server_load = float(((times >= a) & (times <= b)).sum() * self.msg.server_s / width)
        return Figures(self.workers, trials, self.last_report, window, utilization, master_busy,
                       (self.busy_total - self.polling) / trials if trials else float("nan"), self.passes,
                       self.taken / self.passes if self.passes else 0.0, server_load)
