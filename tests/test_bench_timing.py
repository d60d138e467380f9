"""The benchmarks' shared timing rules (benchmarks/timing.py): the steady-state window
leaves start-up and tail out, and medians are taken figure by figure."""

from __future__ import annotations

import sys

import pytest

from tests.helpers.launch import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

from timing import compile_sources, launch_to_exit, median_figures, steady_rate  # noqa: E402


def test_steady_rate_of_an_even_stream() -> None:
    # 100 trials, one every 10 ms: k10 = 10, k90 = 90, 80 trials in 0.8 s
    assert steady_rate([i * 0.01 for i in range(100)]) == pytest.approx(100.0)


def test_steady_rate_leaves_start_up_and_tail_out() -> None:
    # 5 s of start-up before the first trial and a 5 s straggler at the end change the
    # whole-run rate tenfold but not the steady state, whatever the input order
    body = [5.0 + i * 0.01 for i in range(98)]
    times = [0.0, *body, body[-1] + 5.0]
    assert steady_rate(reversed(times)) == pytest.approx(100.0)
    assert len(times) / (times[-1] - times[0]) < 10


def test_steady_rate_uses_ceil_ranks() -> None:
    # n = 15: k10 = ceil(1.5) = 2, k90 = ceil(13.5) = 14 -> 12 trials over times[13] - times[1]
    times = [float(i * i) for i in range(15)]
    assert steady_rate(times) == pytest.approx(12 / (13 * 13 - 1))


@pytest.mark.parametrize("times, message", [
    ([0.1 * i for i in range(9)], "at least 10 trials, got 9"),
    ([1.0] * 20, "has no width"),
])
def test_steady_rate_refuses_what_it_cannot_measure(times: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        steady_rate(times)


def test_median_figures_takes_each_figure_alone() -> None:
    runs = [{"launch": 3.0, "steady": 10.0}, {"launch": 1.0, "steady": 30.0},
            {"launch": 2.0, "steady": 20.0}]
    assert median_figures(runs) == {"launch": 2.0, "steady": 20.0}


def test_launch_to_exit_times_the_whole_process() -> None:
    seconds, done = launch_to_exit([sys.executable, "-c", "import time; time.sleep(0.2)"],
                                   REPO, {}, timeout=30)
    assert done.returncode == 0
    assert 0.2 <= seconds < 20


def test_compile_sources_writes_the_bytecode_cache_even_where_python_may_not(tmp_path) -> None:
    (tmp_path / "diel").mkdir()
    (tmp_path / "diel" / "module.py").write_text("VALUE = 1\n")
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer" / "broken.py").write_text("def (\n")
    with pytest.raises(SystemExit, match="could not byte-compile"):
        compile_sources(tmp_path)
    (tmp_path / "trainer" / "broken.py").unlink()
    assert compile_sources(tmp_path) == [str(tmp_path / "diel"), str(tmp_path / "trainer")]
    assert list((tmp_path / "diel" / "__pycache__").glob("module.*.pyc"))
