"""The lineage plot (``diel plot --kind lineage``): population-based training's family
tree and each changing parameter's schedule, from a population written straight
through the store (tests/helpers/populations.py), looked at through the libraries' own
objects."""

from __future__ import annotations

import json
import sqlite3

import pytest

import diel.results
from diel.plot import figure_data, load_study
from tests.helpers.launch import run_diel_in_process
from tests.helpers.populations import EPOCHS, POPULATION, fill_conditional, fill_population


@pytest.fixture(scope="module")
def population(tmp_path_factory):
    path = tmp_path_factory.mktemp("lineage") / "pbt.db"
    fill_conditional(fill_population(f"sqlite:///{path}"))
    return path


@pytest.fixture(scope="module")
def data(population):
    with diel.results.open(population) as results:
        return figure_data(load_study(results, "pbt", segments=True), "lineage")


def test_the_lineage_has_every_member_its_exploits_and_the_best(data):
    assert [m["number"] for m in data["members"]] == list(range(POPULATION))
    three = data["members"][3]["segments"]
    assert [(s["from_step"], s["to_step"], s["parent_trial"], s["parent_step"])
            for s in three] == [(0, 4, None, None), (4, 8, 1, 4), (8, EPOCHS, 0, 8)]
    assert [(s["from_step"], s["parent_trial"]) for s in data["members"][1]["segments"]] \
        == [(0, None), (8, 1)]   # a resample on its own: a segment, no edge
    assert data["edges"] == [{"donor": 0, "donor_step": 4, "member": 2, "step": 4},
                             {"donor": 1, "donor_step": 4, "member": 3, "step": 4},
                             {"donor": 0, "donor_step": 8, "member": 3, "step": 8}]
    assert data["best"] == POPULATION - 1   # the highest accuracy
    [lr] = data["params"]   # momentum never changed: only lr has a schedule
    assert (lr["name"], lr["scale"]) == ("lr", "linear")
    schedule = next(s for s in lr["schedules"] if s["number"] == 3)
    assert schedule == {"number": 3, "steps": [0, 4, 4, 8, 8, 12],
                        "values": [0.025, 0.025, 0.012, 0.012, 0.03, 0.03]}


def test_matplotlib_draws_the_tree_and_the_schedules(data):
    from matplotlib.collections import LineCollection   # where drawn, not when collected

    from diel.plot.render_mpl import figure as mpl_figure

    fig = mpl_figure(data)
    tree, lr = fig.axes
    lines = [c for c in tree.collections if isinstance(c, LineCollection)]
    assert [len(c.get_segments()) for c in lines] == [1, 2, 2, 3, 1, 3]   # members, edges
    edges = lines[-1].get_segments()
    assert [(round(e[0][1]), round(e[1][1])) for e in edges] == [(0, 2), (1, 3), (0, 3)]
    assert edges[0][0][0] != edges[1][0][0]   # two edges at step 4 lie side by side
    assert any("best: trial 4" in t.get_text() for t in tree.get_legend().get_texts())
    assert tree.yaxis_inverted() and lr.get_ylabel() == "lr"
    [schedules] = lr.collections
    assert len(schedules.get_segments()) == POPULATION
    assert fig.axes[-1].get_xlabel() == "step (epoch)"


def test_plotly_draws_the_same(data):
    from diel.plot.render_plotly import figure as plotly_figure

    fig = plotly_figure(data)
    members = [t for t in fig.data if t.name and t.name.startswith("trial ")]
    assert len(members) == POPULATION
    [edges] = [t for t in fig.data if t.name and t.name.startswith("exploits (3)")]
    assert [y for y in edges.y if y is not None] == [0, 2, 1, 3, 0, 3]
    assert any(t.name == "best: trial 4 (0.52)" for t in fig.data)
    assert fig.layout.yaxis.autorange == "reversed"
    assert fig.layout.yaxis2.title.text == "lr"


def test_a_population_still_running_has_its_lineage_drawn(tmp_path):
    from diel.results import EpochRecord, ResultsStore, TrialStart

    url = f"sqlite:///{tmp_path / 'live.db'}"
    store = ResultsStore(url)
    study = store.open_study("live", "pbt", "accuracy", "maximize", {}).study_id
    store.record(study, starts=[TrialStart(n, {"lr": 0.1 * (n + 1)}, f"k{n}") for n in (0, 1)])
    store.record(study, epochs=[EpochRecord(n, 2, {"accuracy": 0.5}) for n in (0, 1)])
    store.record(study, starts=[TrialStart(1, {"lr": 0.15}, "k", resumed_from=2,
                                           parent_trial=0, parent_step=2)])
    store.close()
    with diel.results.open(url) as results:
        data = figure_data(load_study(results, segments=True), "lineage")
    assert data["best"] is None and [m["status"] for m in data["members"]] == ["running"] * 2
    assert data["edges"] == [{"donor": 0, "donor_step": 2, "member": 1, "step": 2}]
    from diel.plot.render_mpl import figure as mpl_figure
    from diel.plot.render_plotly import figure as plotly_figure

    assert len(mpl_figure(data).axes) == 2
    assert len(plotly_figure(data).data) == 5   # 2 members, the edges, 2 schedules: no best


def test_diel_plot_writes_the_lineage(population, tmp_path):
    for name in ("lineage.png", "lineage.html", "lineage.json"):
        done = run_diel_in_process("plot", str(population), "--study", "pbt", "--kind",
                                   "lineage", "--out", str(tmp_path / name))
        assert done.returncode == 0, done.stderr
        assert (tmp_path / name).stat().st_size > 1000
    assert json.loads((tmp_path / "lineage.json").read_text())["best"] == 4


def test_a_study_without_segments_has_no_lineage(population, tmp_path):
    old = tmp_path / "old.db"
    old.write_bytes(population.read_bytes())
    conn = sqlite3.connect(old)   # as a study written before schema 7
    conn.execute("DELETE FROM segments")
    conn.commit()
    conn.close()
    done = run_diel_in_process("plot", str(old), "--study", "pbt", "--kind", "lineage",
                               "--out", str(tmp_path / "x.png"))
    assert done.returncode == 2 and "no trial of study 'pbt' records segments" in done.stderr
    assert not (tmp_path / "x.png").exists()
