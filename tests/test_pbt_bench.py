"""The PBT benchmark (benchmarks/pbt_bench.py): its port of Ray Tune's toy problem, the
budget it gives successive halving, how it counts the epochs trained and gives every
system the same knowledge, and a smoke run that prints every table with its ratios, with
the peer it cannot run said so."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from diel.checkpoints import take
from diel.worker import Trial
from tests.helpers.launch import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

from pbt_bench import (SYSTEMS, diel_workflow, halving_trials, print_quality,  # noqa: E402
                       problems, quality)
from pbt_functions import (TOY_STEP_SECONDS, Counted, count_reports, optimal_lr,  # noqa: E402
                           toy_member, toy_step)


def test_the_toys_optimal_learning_rate_is_ray_tunes_triangle():
    assert [optimal_lr(a) for a in (0, 5, 50, 100, 150, 200, 300)] == pytest.approx(
        [0.001, 0.001, 0.005, 0.01, 0.005, 0.001, 0.001])


def test_a_toy_step_gains_near_the_optimum_and_loses_far_above_it():
    rng = np.random.default_rng(0)
    near = [toy_step(50.0, 0.005, np.random.default_rng(k)) - 50.0 for k in range(200)]
    far = [toy_step(50.0, 0.05, np.random.default_rng(k)) - 50.0 for k in range(200)]
    assert np.mean(near) > 0.3 and np.mean(far) < -3, (np.mean(near), np.mean(far))
    assert toy_step(0.0, 0.02, rng) >= 0.0


def test_a_toy_member_resumed_from_its_checkpoint_ends_as_an_uninterrupted_one():
    saved: dict[int, object] = {}
    params = {"lr": 0.004, "steps": 12, "seed": 1}

    def trial(steps: int, restore=None) -> Trial:
        return Trial(params={**params, "steps": steps}, number=2, study="toy",
                     checkpoint_every=4, _restorer=restore,
                     _checkpointer=lambda step, state: saved.__setitem__(step, take(state)))

    whole = toy_member(trial(12))
    toy_member(trial(8))
    assert sorted(saved) == [4, 8, 12]
    assert toy_member(trial(12, restore=lambda: (8, saved[8].load()))) == whole


def test_halving_is_given_about_the_budget_of_the_population():
    toy, mlp = problems(quick=False)["toy"], problems(quick=False)["mlp"]
    assert halving_trials(toy) == 68       # rungs 4, 12, 36 of 100 steps: 11.7 steps a trial
    assert halving_trials(mlp) == 12       # rungs 2, 6 of 12 epochs: 4 epochs a trial


def test_every_report_is_counted_and_a_budget_stops_the_members_at_their_next(tmp_path):
    reports = tmp_path / "reports"
    one = Counted(Trial(params={}, number=0, study="toy"), str(reports), budget=3)
    other = Counted(Trial(params={}, number=1, study="toy"), str(reports), budget=3)
    assert [one.report(1, accuracy=1.0), other.report(1, accuracy=1.0),
            one.report(2, accuracy=1.0), other.report(2, accuracy=1.0)] == [False, False, True, True]
    assert count_reports(reports) == 4 and one.number == 0
    params = {"lr": 0.004, "steps": 12, "seed": 1, "reports": str(tmp_path / "toy"), "budget": 5}
    toy_member(Trial(params=params, number=2, study="toy"))
    assert count_reports(tmp_path / "toy") == 5
    assert toy_member(Trial(params=params, number=3, study="toy")) == {"accuracy": 0.0}
    assert count_reports(tmp_path / "toy") == 5     # started after the budget: not trained


def test_diel_is_told_the_members_end_and_halving_the_budget(tmp_path):
    for problem in problems(quick=False).values():
        flows = {system: diel_workflow(problem, system, 0, tmp_path / "reports")
                 for system in SYSTEMS if system.startswith("diel")}
        for system, synchronous in (("diel pbt", False), ("diel pbt sync", True)):
            pbt = flows[system]["modules"]["search"]["settings"]["strategy"]["pbt"]
            assert pbt["max_epochs"] == problem.steps and pbt["synchronous"] is synchronous
        params = {system: flow["modules"]["worker"]["settings"]["params"]
                  for system, flow in flows.items()}
        assert all(p["reports"] == str(tmp_path / "reports") for p in params.values())
        assert [p.get("budget") for p in params.values()] == [None, None, None, problem.budget]
    assert problems(quick=False)["toy"].fixed["step_seconds"] == TOY_STEP_SECONDS > 0


def test_the_systems_left_out_are_shown_not_run(tmp_path, capsys):
    toy = problems(quick=True)["toy"]
    cells = quality([toy], [], None, None, tmp_path, systems=("diel pbt",))
    assert {s for s in SYSTEMS if cells["toy", s].note == "not run (--systems)"} == \
        set(SYSTEMS) - {"diel pbt"}
    print_quality([toy], [], cells)
    assert "| diel halving | not run (--systems) |" in capsys.readouterr().out


@pytest.mark.mpi
@pytest.mark.slow
def test_a_smoke_run_prints_every_table_with_its_ratios(tmp_path):
    done = subprocess.run([sys.executable, "benchmarks/pbt_bench.py", "--quick", "--problems", "toy",
                           "--repeats", "1", "--ray-python", str(tmp_path / "no-python")],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    for row in ("| system | Ray's PBT toy: 4 x 16, interval 4 | epochs |",
                "| diel pbt | ", "| diel pbt sync | ", "| diel random | ", "| diel halving | ",
                "| problem | diel pbt | diel pbt sync | diel random | diel halving | Ray Tune PBT |",
                "| state | diel returns | diel touched | Ray Tune 2.60.0 restore returns | "
                "Ray Tune touched | diel / Ray Tune, touched |",
                "| state | diel | exploits | Ray Tune 2.60.0 | exploits | diel / Ray Tune |",
                "| 10 MiB | "):
        assert row in out, out
    assert "> diel random's median: " in out and ", ratio " in out
    assert f"Ray Tune: not measured: --ray-python {tmp_path / 'no-python'}: No such file" in out
    assert "| Ray Tune PBT | not measured: --ray-python" in out
