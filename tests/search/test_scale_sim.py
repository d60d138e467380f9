"""The scale simulation (benchmarks/scale_sim.py, docs/scaling.md): its world keeps time
as documented, and a small simulation through the real master records every trial once."""

from __future__ import annotations

import sqlite3
import sys

import pytest

from tests.helpers.launch import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

from scale_sim import main, simulate  # noqa: E402
from scale_sim_world import Messages, World  # noqa: E402

FREE = Messages(put_s=0.0, rtt_s=0.0, server_s=0.0)


class FakeCpu:
    """A CPU clock that moves on only when the fake master works."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def fake_master(world: World, cpu: FakeCpu, trials: int, workers: int, cost: float,
                prefetch: int) -> None:
    """A master that keeps ``1 + prefetch`` tasks per worker out and spends ``cost`` CPU
    seconds per report (a stand-in for diel's)."""
    put = 0
    for _ in range(workers * (1 + prefetch)):
        world.tput("t", {"trial": put, "params": {}})
        put += 1
    done = 0
    while done < trials:
        try:
            reports = world.tget_many("r", 1000, timeout=0.5)
        except TimeoutError:
            continue
        for _ in reports:
            cpu.t += cost
            done += 1
            if put < trials:
                world.tput("t", {"trial": put, "params": {}})
                put += 1
    for _ in range(workers):
        world.tput("t", None)   # the stop markers, as diel's master puts them


def world_run(workers: int, trials: int, cost: float, messages: Messages = FREE,
              prefetch: int = 0) -> World:
    cpu = FakeCpu()
    world = World(workers, "t", "r", duration=lambda n: 1.0,
                  result=lambda task, w, s: {"trial": task["trial"]},
                  epoch=lambda task, w, k, s: {}, messages=messages, cpu=cpu)
    fake_master(world, cpu, trials, workers, cost, prefetch)
    return world


def test_a_free_master_keeps_every_worker_busy() -> None:
    world = world_run(workers=4, trials=40, cost=0.0)
    f = world.figures()
    assert f.trials == 40
    assert f.utilization == pytest.approx(1.0)
    assert f.master_busy == pytest.approx(0.0)
    assert f.span == pytest.approx(10.0)     # 10 waves of 1 s trials, back to back


def test_a_slow_master_makes_workers_wait() -> None:
    # 10 workers finish 10 trials a second; a report costs the master 0.2 s: it can
    # serve 5 a second, so it is busy all the time and the workers half of it.
    f = world_run(workers=10, trials=200, cost=0.2).figures()
    assert f.master_busy == pytest.approx(1.0, abs=0.02)
    assert f.utilization == pytest.approx(0.5, abs=0.05)
    assert f.master_s_per_trial == pytest.approx(0.2)


@pytest.mark.parametrize("prefetch, wait", [(0, 2), (1, 1)])
def test_message_round_trips_delay_the_workers(prefetch: int, wait: int) -> None:
    # Between two trials a worker waits one round trip when its next task is queued at
    # the server (prefetch); else two: its report reaches the master, the task comes back.
    rtt = 0.1
    f = world_run(workers=2, trials=200, cost=0.0, messages=Messages(0.0, rtt, 0.0),
                  prefetch=prefetch).figures()
    assert f.utilization == pytest.approx(1.0 / (1.0 + wait * rtt), rel=0.02)


@pytest.mark.parametrize("epochs", [0, 3])
def test_real_master_records_every_simulated_trial_once(tmp_path, epochs: int) -> None:
    run = simulate("random", workers=8, mean=1.0, trials=60, messages=FREE, epochs=epochs,
                   folder=tmp_path)
    f = run.figures
    assert f.trials == 60
    assert f.window is not None and 0.0 <= f.window[0] < f.window[1] <= f.span
    assert 0.0 <= f.utilization <= 1.0 and 0.0 <= f.master_busy <= 1.0
    assert f.master_s_per_trial > 0
    assert list(run.recorded) == ["ok"] and sorted(run.recorded["ok"]) == list(range(60))
    with sqlite3.connect(tmp_path / "scale_sim.db") as db:
        rows = db.execute("SELECT number, COUNT(*) FROM trials GROUP BY number").fetchall()
        epoch_rows = db.execute("SELECT COUNT(*), COUNT(DISTINCT trial_id || '/' || epoch) "
                                "FROM trial_metrics").fetchone()
    assert sorted(number for number, _ in rows) == list(range(60))
    assert all(count == 1 for _, count in rows)
    assert epoch_rows == (60 * epochs, 60 * epochs)   # every epoch report, each once


def test_the_benchmark_prints_its_tables(capsys) -> None:
    assert main(["--strategies", "random", "--workers", "2", "6", "--means", "1",
                 "--min-trials", "30", "--refine", "1"]) == 0
    out = capsys.readouterr().out
    assert "| random | 1 s | 2 | 30 |" in out
    assert "| random | 1 s | 6 | 30 |" in out
    assert "master busy ≥ 90% at N" in out
