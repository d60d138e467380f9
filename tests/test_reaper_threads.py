"""The reaper (tests/helpers/reaper.py) is told from more than one thread (the PostgreSQL
server starts in a thread of its own while tests run): two first instructions at once
start one reaper, which gets both."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.helpers.launch import REPO

# Two threads give their first instruction at once to a reaper whose start is slow (a
# stand-in for Popen that takes 0.2 s): how many were started, and what each was told.
RACE = textwrap.dedent("""
    import io, threading, time
    from tests.helpers import reaper

    started = []

    class SlowPopen:
        def __init__(self, *args, **kwargs):
            time.sleep(0.2)
            self.stdin = io.BytesIO()
            started.append(self)

    reaper.subprocess.Popen = SlowPopen
    reaper.atexit.register = lambda function: None
    threads = [threading.Thread(target=reaper.reap_at_exit, args=(f"group {n}",))
               for n in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    told = [line for p in started for line in p.stdin.getvalue().decode().splitlines()]
    print(len(started), sorted(told))
""")


def test_two_threads_first_instructions_start_one_reaper_told_both() -> None:
    done = subprocess.run([sys.executable, "-c", RACE], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1 ['group 1', 'group 2']", done.stdout
