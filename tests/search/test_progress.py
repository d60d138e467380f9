"""The progress line: redrawn in place on a terminal, periodic plain lines otherwise."""

from __future__ import annotations

import io

from diel.search.engine import Stats
from diel.search.progress import ProgressDisplay, describe

STATS = Stats(done=4, total=9, running=3, failed=1, pruned=0, best=0.97, best_trial=2,
              elapsed=83.0)


def test_describe():
    assert describe("mnist", STATS) == \
        "search mnist: 4/9 done, 3 running, 1 failed, best 0.97 (trial 2), 0:01:23"


def test_queued_trials_are_shown_apart_from_running_ones():
    queued = Stats(done=4, total=9, running=2, failed=0, pruned=1, best=None, best_trial=None,
                   elapsed=5.0, queued=2)
    assert describe("mnist", queued) == \
        "search mnist: 4/9 done, 2 running, 2 queued, 0 failed, 1 pruned, 0:00:05"


def test_plain_lines_every_interval():
    now = [0.0]
    out = io.StringIO()
    p = ProgressDisplay(out, "s", interval=10, clock=lambda: now[0], tty=False)
    for t in (0, 1, 5, 10.5, 12, 21):
        now[0] = t
        p.update(STATS)
    p.close(STATS)
    assert out.getvalue().count("\n") == 4 and "\r" not in out.getvalue()


def test_tty_redraws_one_line():
    out = io.StringIO()
    p = ProgressDisplay(out, "s", clock=lambda: 0.0, tty=True)
    p.update(STATS)
    p.update(STATS, force=True)
    p.close(STATS)
    assert out.getvalue().count("\r") == 3 and out.getvalue().endswith("\n")
    assert out.getvalue().count("\n") == 1


def test_the_live_line_is_short_and_never_wider_than_the_terminal():
    assert describe("mnist", STATS, live=True) == \
        "search mnist 0:01:23: 4/9 done, 3 running, 1 failed, best 0.97 (trial 2)"
    quiet = Stats(done=9, total=9, running=0, failed=0, pruned=0, best=0.97, best_trial=2,
                  elapsed=3.0)
    assert describe("mnist", quiet, live=True) == \
        "search mnist 0:00:03: 9/9 done, best 0.97 (trial 2)"
    out = io.StringIO()
    p = ProgressDisplay(out, "a-study-with-a-long-name", clock=lambda: 0.0, tty=True, width=40)
    p.update(STATS)
    p.close(STATS)
    assert all(len(line) <= 39 for line in out.getvalue().replace("\n", "\r").split("\r"))
