"""benchmarks/search_bench.py's Ray Tune rows: skipped with a note saying why where Ray
Tune 2.60.0 cannot be run; its default settings and actor reuse where it can."""

from __future__ import annotations

import sys

from tests.helpers.launch import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

import search_bench  # noqa: E402


def test_without_a_ray_python_its_rows_are_skipped_with_a_note(capsys):
    names = [system.name for system in search_bench.systems(4, 2000, None, 500)]
    assert not any(name.startswith("Ray Tune") for name in names)
    assert "Ray Tune: not measured: no --ray-python given" in capsys.readouterr().out


def test_a_python_that_is_not_there_is_named(tmp_path):
    missing = tmp_path / "no-python"
    assert search_bench.ray_missing(str(missing)) == f"--ray-python {missing}: No such file or directory"


def test_with_ray_its_two_rows_are_its_default_and_actor_reuse(monkeypatch):
    monkeypatch.setattr(search_bench, "ray_missing", lambda python: None)
    rows = [s for s in search_bench.systems(4, 2000, "ray-python", 500)
            if s.name.startswith("Ray Tune")]
    assert [row.name for row in rows] == ["Ray Tune 2.60.0, default settings, 4 CPUs, one a trial",
                                          "Ray Tune 2.60.0, `reuse_actors=True`, 4 CPUs, one a trial"]
    assert {row.max_trials for row in rows} == {500}



def test_rates_under_ten_a_second_keep_two_significant_digits():
    assert [search_bench.rate(r) for r in (0.213, 5.5, 1403.2)] == ["0.21", "5.5", "1,403"]
