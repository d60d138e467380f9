"""The search-quality benchmark's test functions have the minima its regret is measured
against, and the benchmark itself runs (benchmarks/search_quality.py --quick)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import numpy as np
import pytest

from benchmarks.quality_functions import (BRANIN_BOUNDS, BRANIN_MIN, BRANIN_MINIMISERS,
                                          HARTMANN6_MIN, HARTMANN6_MINIMISER, HARTMANN6_NAMES,
                                          branin, branin_trial, hartmann6, hartmann6_trial)
from diel.worker import Trial
from tests.helpers.launch import REPO


@pytest.mark.parametrize("point", BRANIN_MINIMISERS)
def test_branin_has_its_minimum_at_each_of_its_three_minimisers(point: tuple[float, float]) -> None:
    assert branin(*point) == pytest.approx(BRANIN_MIN, abs=1e-6)


def test_hartmann6_has_its_minimum_at_its_minimiser() -> None:
    assert hartmann6(HARTMANN6_MINIMISER) == pytest.approx(HARTMANN6_MIN, abs=1e-5)


def test_no_point_of_the_domains_is_below_the_known_minima() -> None:
    rng = np.random.default_rng(0)
    lows, highs = np.array(BRANIN_BOUNDS).T
    branin_values = [branin(*rng.uniform(lows, highs)) for _ in range(20_000)]
    hartmann_values = [hartmann6(rng.uniform(0, 1, 6)) for _ in range(20_000)]
    assert min(branin_values) > BRANIN_MIN - 1e-6
    assert min(hartmann_values) > HARTMANN6_MIN - 1e-6
    # a step away from a minimiser goes up: these are minima, not some other value
    assert branin(BRANIN_MINIMISERS[1][0] + 0.05, BRANIN_MINIMISERS[1][1]) > BRANIN_MIN + 1e-4
    assert hartmann6(np.array(HARTMANN6_MINIMISER) + 0.02) > HARTMANN6_MIN + 1e-3


def test_the_run_functions_read_the_trial_params() -> None:
    x1, x2 = BRANIN_MINIMISERS[0]
    assert branin_trial(Trial(params={"x1": x1, "x2": x2}, number=0, study="t")) == \
        pytest.approx(BRANIN_MIN, abs=1e-6)
    params = dict(zip(HARTMANN6_NAMES, HARTMANN6_MINIMISER))
    assert hartmann6_trial(Trial(params=params, number=0, study="t")) == \
        pytest.approx(HARTMANN6_MIN, abs=1e-5)


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("optuna") is None,
                    reason="the benchmark's baseline needs optuna: pip install -e '.[test]'")
def test_the_quick_benchmark_runs_and_prints_its_table() -> None:
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "search_quality.py"),
                           "--quick"], capture_output=True, text=True, timeout=240, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "| system | Branin: regret, 20 trials | MNIST MLP: best accuracy, 6 trials |" in out, out
    for row in ("| diel `random`, 4 async workers | ", "| Optuna TPE, sequential | "):
        line = next(line for line in out.splitlines() if line.startswith(row))
        assert line.count("[") == 2, line          # median [25%, 75%]: Branin, the model
    assert "(a) one proposal with" in out, out
    assert "(b) dispatch:" in out and "trials/s steady state" in out, out
