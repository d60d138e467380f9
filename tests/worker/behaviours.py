"""Objective functions for the worker tests: each ``mode`` parameter misbehaves its own way;
run as a script, a program trial that leaves processes behind."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time


def objective(trial):
    """One report, then what ``trial.params["mode"]`` asks for; ``ok`` succeeds."""
    mode = trial.params["mode"]
    if trial.report(1, accuracy=0.1, loss=2.0):
        return {"accuracy": 0.1}
    if mode == "segfault":
        ctypes.string_at(0)
    elif mode == "abort":
        os.abort()
    elif mode == "killed":   # what the kernel's out-of-memory killer does
        os.kill(os.getpid(), signal.SIGKILL)
    elif mode == "exit":
        os._exit(3)
    elif mode == "sysexit":
        sys.exit(3)
    elif mode == "raise":
        raise ValueError("planted failure")
    elif mode == "nan":
        return float("nan")
    elif mode == "hang":
        print("hanging now", file=sys.stderr, flush=True)
        time.sleep(600)
    elif mode == "number":
        return 0.5
    return {"accuracy": 0.9, "loss": 0.1, "pid": os.getpid()}


def reporting(trial):
    """Reports ``steps`` epochs whose accuracy is ``quality * step``; obeys prune orders."""
    quality = float(trial.params.get("quality", 0.1))
    for step in range(1, int(trial.params.get("steps", 5)) + 1):
        time.sleep(float(trial.params.get("pause", 0.0)))
        if trial.report(step, accuracy=quality * step):
            return {"accuracy": quality * step}
    return {"accuracy": quality * int(trial.params.get("steps", 5))}


# -- processes a trial starts, damage it does, text it prints ---------------------------

def start_family() -> list[int]:
    """Start the processes a trial may leave behind and return their pids: a ``sleep``
    (holding our stdout, as a forgotten helper does), a ``sleep`` whose shell has exited
    (orphaned), and a Python that ignores SIGTERM (only SIGKILL ends it)."""
    sleeper = subprocess.Popen(["sleep", "600"])
    shell = subprocess.run(["sh", "-c", "sleep 600 >/dev/null 2>&1 & echo $!"],
                           capture_output=True, text=True, check=True)
    stubborn = subprocess.Popen(
        [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
                               " print('ready', flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE, text=True)
    stubborn.stdout.readline()   # its SIGTERM is ignored from now on
    return [sleeper.pid, int(shell.stdout), stubborn.pid]


def note_pids(path: str, pids: list[int]) -> None:
    with open(path, "a") as stream:
        stream.write(" ".join(str(pid) for pid in [os.getpid(), *pids]) + "\n")


def family(trial):
    """Starts a family of processes (:func:`start_family`), writes its own pid and theirs
    as a line of ``params["pids"]``, then as ``params["end"]`` says: ``return`` returns,
    ``hang`` sleeps without reporting, ``report`` reports every 0.05 s."""
    note_pids(trial.params["pids"], start_family())
    end = trial.params.get("end", "return")
    if end == "hang":
        time.sleep(600)
    step = 0
    while end == "report":
        step += 1
        time.sleep(0.05)
        if trial.report(step, accuracy=0.1):
            break
    return {"accuracy": 0.5}


def misbehave(trial):
    """Does to its own process what ``params["mode"]`` says, then returns where it ran."""
    mode = trial.params["mode"]
    if mode == "close-sys-stdout":
        sys.stdout.close()
    elif mode == "close-fd-1":
        os.close(1)
    elif mode == "close-sys-stderr":
        sys.stderr.close()
    elif mode == "close-fd-2":
        os.close(2)
    elif mode == "replace-fd-1":
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    elif mode == "chdir":
        os.chdir("/")
    elif mode == "print":
        print("printed", flush=True)
    elif mode == "unfinished":   # no line end, and left in sys.stderr's buffer
        sys.stderr.write("unfinished by the first trial")
    elif mode == "big-line":
        sys.stderr.write("x" * 20_000_000)
        sys.stderr.write(" the end of the big line")
        sys.stderr.flush()
        os._exit(3)
    elif mode == "last-words":
        print("last words of the second trial", file=sys.stderr, flush=True)
        os._exit(3)
    elif mode == "long-error":
        raise ValueError("y" * 10_000_000)
    return {"cwd": os.getcwd(), "pid": os.getpid()}


if __name__ == "__main__":   # a program trial: python behaviours.py PIDS END (see family)
    note_pids(sys.argv[1], start_family())
    if sys.argv[2] == "hang":
        time.sleep(600)
    while sys.argv[2] == "report":
        with open(os.environ["DIEL_REPORT_FILE"], "a") as report:
            report.write('{"step": 1, "accuracy": 0.1}\n')
        time.sleep(0.05)
    with open(os.environ["DIEL_RESULT_FILE"], "w") as result:
        result.write("0.5")
