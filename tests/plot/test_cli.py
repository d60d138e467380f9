"""``diel plot``: every kind to PNG, SVG, HTML and JSON from the shipped studies, the
database left byte for byte as it was, and every mistake one line with exit status 2."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

import diel.plot
from diel.cli import main
from tests.helpers.launch import run_diel, run_diel_in_process

KINDS = ["history", "parallel", "importance", "slice", "curves", "timeline"]
FORMATS = [".png", ".svg", ".html", ".json"]


def checksum(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def wal_size(db: Path) -> int:
    """The bytes in the database's write-ahead log (a reader of a WAL database may leave
    an empty one beside it, never one with pages in it)."""
    wal = db.with_name(db.name + "-wal")
    return wal.stat().st_size if wal.exists() else 0


def plot(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["plot", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def check_written(out: Path, kind: str) -> None:
    """``out`` holds a plot in the format its extension names."""
    if out.suffix == ".png":
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert out.stat().st_size < 200_000
    elif out.suffix == ".svg":
        assert "<svg" in out.read_text()
    elif out.suffix == ".html":
        page = out.read_text()
        assert "Plotly.newPlot" in page and 'src="http' not in page   # JavaScript embedded
    else:
        assert json.loads(out.read_text())["kind"] == kind


@pytest.mark.mpi
@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_of_the_shipped_studies(shipped, tmp_path, capsys, kind):
    """Each kind of each study in one format, the formats taken in turn (the figures'
    content is checked in test_figures.py), the database only read."""
    for i, (name, db) in enumerate(shipped.items()):
        before = checksum(db)
        out = tmp_path / f"{name}-{kind}{FORMATS[(KINDS.index(kind) + i) % len(FORMATS)]}"
        code, said, err = plot(capsys, db, "--kind", kind, "--out", out)
        assert code == 0, err
        assert said.strip() == f"wrote {out}: {kind} of study {name}"
        check_written(out, kind)
        assert checksum(db) == before and wal_size(db) == 0   # only read


@pytest.mark.mpi
def test_every_format(shipped, tmp_path, capsys):
    for suffix in FORMATS:
        out = tmp_path / f"history{suffix}"
        code, _, err = plot(capsys, shipped["mnist_random"], "--kind", "history", "--out", out)
        assert code == 0, err
        check_written(out, "history")


def test_pareto_of_a_study_of_two_objectives(synthetic, tmp_path, capsys):
    out = tmp_path / "front.json"
    code, _, err = plot(capsys, synthetic, "--study", "tradeoff", "--kind", "pareto",
                        "--objective", "time", "--objective", "accuracy", "--out", out)
    assert code == 0, err
    data = json.loads(out.read_text())
    assert [o["expression"] for o in data["objectives"]] == ["time", "accuracy"]
    assert sorted(t["number"] for t in data["trials"] if t["front"]) == [0, 1, 3]


@pytest.mark.mpi
@pytest.mark.parametrize("args, message", [
    (["--kind", "pareto"], "study 'mnist_grid' has one objective, 'accuracy - 0.001 * time' "
                           "(maximize); a Pareto front needs a study of several"),
    (["--kind", "history", "--study", "nope"], "; its studies: mnist_grid"),
    (["--kind", "curves", "--metric", "acc"],
     "no trial of study 'mnist_grid' reported the metric 'acc'; the per-epoch metrics are "
     "accuracy, loss, time"),
    (["--kind", "history", "--metric", "loss"], "--metric chooses the metrics of --kind curves"),
    (["--kind", "history", "--objective", "loss"],
     "study 'mnist_grid' has no objective 'loss'; its objectives: 'accuracy - 0.001 * time'"),
])
def test_mistakes_about_the_study(shipped, tmp_path, capsys, args, message):
    db = shipped["mnist_grid"]
    code, out, err = plot(capsys, db, *args, "--out", tmp_path / "x.png")
    assert code == 2 and out == ""
    assert err.startswith("diel plot: error: ") and len(err.splitlines()) == 1, err
    assert message in err, err
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("study, message", [
    ("waiting", "study 'waiting' has no finished trial yet (1 running); there is nothing to plot"),
    ("broken", "study 'broken' has no ok trial with a value of 'accuracy' (1 failed); a "
               "history plot needs one"),
    (None, "has 3 studies (broken, tradeoff, waiting); choose one with --study"),
])
def test_nothing_to_plot_is_said_not_drawn(synthetic, tmp_path, capsys, study, message):
    chosen = ["--study", study] if study else []
    code, _, err = plot(capsys, synthetic, *chosen, "--kind", "history",
                        "--out", tmp_path / "x.png")
    assert code == 2 and message in err, err
    assert not (tmp_path / "x.png").exists()


def test_mistakes_about_the_command(synthetic, tmp_path, capsys):
    code, _, err = plot(capsys, synthetic, "--kind", "history", "--out", tmp_path / "x.pdf")
    assert code == 2 and "unknown extension '.pdf'; use .png or .svg (matplotlib), .html" in err
    code, _, err = plot(capsys, synthetic, "--kind", "history", "--out", tmp_path / "no" / "x.png")
    assert code == 2 and "there is no folder" in err
    code, _, err = plot(capsys, tmp_path / "missing.db", "--kind", "history",
                        "--out", tmp_path / "x.png")
    assert code == 2 and "no results database at" in err
    named_like_a_plot = tmp_path / "results.json"
    named_like_a_plot.write_bytes(synthetic.read_bytes())
    before = checksum(named_like_a_plot)
    code, _, err = plot(capsys, named_like_a_plot, "--study", "tradeoff", "--kind", "history",
                        "--out", named_like_a_plot)
    assert code == 2 and "is the results database itself" in err
    assert checksum(named_like_a_plot) == before
    with pytest.raises(SystemExit) as exit_:
        main(["plot", str(synthetic), "--kind", "histogram", "--out", "x.png"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'histogram' (choose from" in err and "timeline" in err


@pytest.mark.parametrize("suffix, library", [("png", "matplotlib"), ("html", "plotly")])
def test_a_missing_plotting_library_names_the_extra(synthetic, tmp_path, capsys, monkeypatch,
                                                   suffix, library):
    monkeypatch.setitem(sys.modules, library, None)     # import fails as if not installed
    for module in ("render_mpl", "render_plotly"):      # imported again, without it
        monkeypatch.delitem(sys.modules, f"diel.plot.{module}", raising=False)
        monkeypatch.delattr(diel.plot, module, raising=False)
    code, _, err = plot(capsys, synthetic, "--study", "tradeoff", "--kind", "history",
                        "--out", tmp_path / f"x.{suffix}")
    assert code == 2, err
    assert f"needs {library}, which is not installed" in err
    assert "install the plotting extra: pip install 'diel[plot]'" in err


def test_importance_without_optuna_names_the_extra(synthetic, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)
    code, _, err = plot(capsys, synthetic, "--study", "tradeoff", "--kind", "importance",
                        "--out", tmp_path / "x.json")
    assert code == 2 and "the importance plot needs optuna" in err and "diel[plot]" in err


@pytest.mark.mpi
def test_importance_trials_bounds_the_importance_plot(shipped, tmp_path, capsys):
    db = shipped["mnist_random"]
    code, _, err = plot(capsys, db, "--kind", "importance", "--importance-trials", "5",
                        "--out", tmp_path / "x.json")
    assert code == 0, err
    data = json.loads((tmp_path / "x.json").read_text())
    assert data["trials"] == 5 and data["ok_trials"] > 5
    code, _, err = plot(capsys, db, "--kind", "history", "--importance-trials", "5",
                        "--out", tmp_path / "y.png")
    assert code == 2 and "--importance-trials bounds --kind importance" in err
    refused = run_diel("plot", db, "--kind", "importance", "--importance-trials", "1",
                       "--out", tmp_path / "z.png", timeout=60)
    assert refused.returncode == 2
    assert "expected 0 (every trial) or at least 2, got 1" in refused.stderr


def test_help_lists_the_kinds_and_formats():
    result = run_diel_in_process("plot", "--help")
    assert result.returncode == 0
    for text in ["history", "parallel", "importance", "slice", "curves", "pareto", "timeline",
                 ".png", ".html", "pip install 'diel[plot]'", "--metric", "--objective",
                 "--importance-trials"]:
        assert text in result.stdout


@pytest.mark.parametrize("value", ["-1", "99999999999999999999999", "2.5", "nan", "", "1e3"])
def test_importance_trials_out_of_range_is_one_line_and_exit_2(synthetic, tmp_path, capsys,
                                                               value):
    with pytest.raises(SystemExit) as stop:
        main(["plot", str(synthetic), "--kind", "importance", "--importance-trials", value,
              "--out", str(tmp_path / "x.json")])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith(f"argument --importance-trials: expected a whole number from 0 to "
                            f"9223372036854775807, got {value!r}")
    assert not (tmp_path / "x.json").exists()
