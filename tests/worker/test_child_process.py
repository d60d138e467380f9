"""An isolated child starts light and leaves at once. It imports the checkpoint, resume
and tuple-space code only when a trial needs it; when its rank closes it, its exit
handlers run (a trial's own ``atexit``) but not the interpreter's teardown of what its
trials imported, and the rank sees it go without a polling wait
(:func:`~diel.executive.process_groups.wait_exit`)."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from diel.executive.process_groups import fork, stop, wait_exit
from diel.worker.isolated import IsolatedRunner
from tests.helpers.links import ScriptedLink

SLOW_TEARDOWN = 20.0   # seconds a module global takes to be torn down
#: What a child imports only when a trial checkpoints, restores or reads a copy in memory.
LATER = ("tuplespace", "diel.checkpoints", "diel.worker.link", "diel.worker.resume",
         "diel.search.protocol", "numpy")


def test_the_child_starts_without_the_checkpoint_or_tuple_space_code():
    done = subprocess.run([sys.executable, "-c", "import sys, diel.worker.child; "
                           "print(' '.join(sys.modules))"], capture_output=True, text=True,
                          timeout=60, check=True)
    assert [name for name in LATER if name in done.stdout.split()] == []


def closes_at_once_with_its_exit_handlers_run(folder, spec: str, grace: float) -> None:
    """A child running ``spec`` (whose trial registers an exit handler writing out.txt)
    runs one trial, then closes in well under ``SLOW_TEARDOWN`` with its handler run."""
    out = folder / "out.txt"
    runner = IsolatedRunner(spec, folder, dict(os.environ), grace=grace)
    info = {"number": 0, "study": "s", "copy": 0, "device": None, "params": {"out": str(out)}}
    assert runner.run(info, ScriptedLink(), None).status == "ok"
    started = time.monotonic()
    runner.close()
    assert time.monotonic() - started < SLOW_TEARDOWN / 2
    assert out.read_text() == "exit handler ran"


def test_a_closed_child_runs_its_exit_handlers_and_skips_a_slow_teardown(tmp_path):
    (tmp_path / "ending.py").write_text(textwrap.dedent(f"""
        import atexit, time

        class Slow:
            def __del__(self):
                time.sleep({SLOW_TEARDOWN})

        kept = Slow()   # torn down with the module, at the interpreter's teardown

        def objective(trial):
            out = trial.params["out"]
            atexit.register(lambda: open(out, "w").write("exit handler ran"))
            return {{"accuracy": 1.0}}
    """))
    closes_at_once_with_its_exit_handlers_run(tmp_path, "ending.py:objective",
                                              grace=2 * SLOW_TEARDOWN)



def test_a_closed_child_whose_trial_left_a_thread_pool_exits_at_once(tmp_path):
    """A thread pool a trial left open (its idle workers are not daemons) is shut down as
    the interpreter's exit shuts it down, not waited for until the rank stops the child:
    the child exits at once and its exit handlers run."""
    (tmp_path / "pooled.py").write_text(textwrap.dedent("""
        import atexit
        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(2)   # never shut down

        def objective(trial):
            out = trial.params["out"]
            atexit.register(lambda: open(out, "w").write("exit handler ran"))
            return {"accuracy": pool.submit(lambda: 1.0).result()}
    """))
    closes_at_once_with_its_exit_handlers_run(tmp_path, "pooled.py:objective",
                                              grace=SLOW_TEARDOWN)

def test_wait_exit_says_whether_the_process_has_exited_and_collects_it():
    quick = subprocess.Popen([sys.executable, "-c", "pass"])
    assert wait_exit(quick, 30) and quick.returncode == 0
    slow = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert not wait_exit(slow, 0.2) and slow.returncode is None
    finally:
        slow.kill()
        slow.wait()


def test_wait_exit_works_past_select_s_descriptor_limit():
    """The process's descriptor may be numbered past FD_SETSIZE (1024) in a rank with many
    files open; ``select()`` refuses those."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"at most {hard} open files allowed here")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held = []
    try:
        while not held or held[-1] < 1100:
            held.append(os.open(os.devnull, os.O_RDONLY))
        quick = subprocess.Popen([sys.executable, "-c", "pass"])
        assert wait_exit(quick, 30) and quick.returncode == 0
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_forked_process_is_waited_for_within_a_timeout():
    """A process made by fork (a rank's first trial child) answers wait(timeout) as a
    Popen does: TimeoutExpired while it runs, its status once it has ended."""
    forked = fork(lambda: time.sleep(60), keep=(), stderr=os.dup(2))
    try:
        started = time.monotonic()
        with pytest.raises(subprocess.TimeoutExpired):
            forked.wait(timeout=0.2)
        assert 0.2 <= time.monotonic() - started < 5
    finally:
        code = stop(forked, grace=5)
    assert code == -signal.SIGTERM and forked.wait(timeout=1) == code
