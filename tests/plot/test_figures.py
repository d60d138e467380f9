"""Every plot kind for the shipped grid and random studies, looked at through the
libraries' own objects: how many points, lines and bars, the axis labels, log axes,
whole-number and categorical ticks (matplotlib figures and Plotly figures alike)."""

from __future__ import annotations

import math

import pytest

import diel.results
from diel.plot import figure_data, load_study
from diel.plot._style import STATUS_COLOURS

# matplotlib and Plotly are imported by the tests that draw, not when the file is
# collected (on every worker of every run of the suite; most of these tests are MPI's)
GRID_PARAMS = ["learning_rate", "layers", "width", "activation"]
RANDOM_PARAMS = ["learning_rate", "momentum", "layers", "width", "activation"]
PARAMS = {"mnist_grid": GRID_PARAMS, "mnist_random": RANDOM_PARAMS}
SCALES = {"mnist_grid": {"learning_rate": "linear", "layers": "int", "width": "int",
                         "activation": "categorical"},
          "mnist_random": {"learning_rate": "log", "momentum": "linear", "layers": "int",
                           "width": "int", "activation": "categorical"}}
OBJECTIVE = {"mnist_grid": "accuracy - 0.001 * time", "mnist_random": "accuracy"}
CHOICES = {"mnist_grid": ["relu", "tanh"], "mnist_random": ["relu", "tanh", "sigmoid"]}


@pytest.fixture(scope="module", params=["mnist_grid", "mnist_random"])
def study(request, shipped):
    with diel.results.open(shipped[request.param]) as results:
        return load_study(results, epochs=True)


def trials(study, *statuses):
    return [t for t in study.trials if t["status"] in statuses]


@pytest.mark.mpi
def test_the_axes_follow_the_space(study):
    assert {a.name: a.scale for a in study.axes} == SCALES[study.name]
    activation = next(a for a in study.axes if a.name == "activation")
    assert activation.labels() == CHOICES[study.name]


@pytest.mark.mpi
def test_history(study):
    from matplotlib.collections import PathCollection

    from diel.plot.render_mpl import figure as mpl_figure
    from diel.plot.render_plotly import figure as plotly_figure

    data = figure_data(study, "history")
    ok = trials(study, "ok")
    assert [t["number"] for t in data["trials"]] == \
        [t["number"] for t in trials(study, "ok", "pruned")]
    best = max(t["objective"] for t in ok)
    assert data["best"][-1]["value"] == pytest.approx(best)
    values = [b["value"] for b in data["best"]]
    assert values == sorted(values)      # maximize: the best so far never falls
    ax = mpl_figure(data).axes[0]
    assert ax.get_xlabel() == "trial"
    assert ax.get_ylabel() == f"{OBJECTIVE[study.name]} (maximize)"
    dots = [c for c in ax.collections if isinstance(c, PathCollection)]
    assert sum(len(c.get_offsets()) for c in dots) == len(data["trials"])
    assert len(dots[0].get_offsets()) == len(ok)
    fig = plotly_figure(data)
    assert [len(trace.x) for trace in fig.data][0] == len(ok)
    assert fig.data[-1].name == "best so far" and fig.data[-1].line.shape == "hv"
    assert fig.layout.yaxis.title.text == f"{OBJECTIVE[study.name]} (maximize)"


@pytest.mark.mpi
def test_parallel(study):
    from matplotlib.collections import LineCollection

    from diel.plot.render_mpl import figure as mpl_figure
    from diel.plot.render_plotly import figure as plotly_figure

    data = figure_data(study, "parallel")
    ok = trials(study, "ok")
    assert sorted(data["numbers"]) == [t["number"] for t in ok]
    assert [a["name"] for a in data["axes"]] == PARAMS[study.name]
    ax = mpl_figure(data).axes[0]
    lines = next(c for c in ax.collections if isinstance(c, LineCollection))
    assert len(lines.get_segments()) == len(ok)
    assert all(len(segment) == len(PARAMS[study.name]) + 1 for segment in lines.get_segments())
    assert [t.get_text() for t in ax.get_xticklabels()] == \
        PARAMS[study.name] + [OBJECTIVE[study.name]]
    labels = {t.get_text() for t in ax.texts}
    assert set(CHOICES[study.name]) <= labels           # a tick per category
    fig = plotly_figure(data)
    dims = {d.label: d for d in fig.data[0].dimensions}
    assert list(dims["activation"].ticktext) == CHOICES[study.name]
    assert len(dims["activation"].values) == len(ok)
    if study.name == "mnist_random":                    # loguniform: a log10 axis
        log = dims["learning_rate (log)"]
        assert list(log.ticktext) == ["0.01", "0.1", "1"]
        lrs = sorted(t["params"]["learning_rate"] for t in ok)
        assert sorted(log.values) == pytest.approx([math.log10(v) for v in lrs])
        first = [t for t in ax.texts if t.get_position()[0] == pytest.approx(0.04)]
        low, high = math.log10(lrs[0]), math.log10(lrs[-1])
        for text in first:                              # 1-2-5 ticks placed in log space
            value = float(text.get_text())
            assert f"{value:.0e}"[0] in "125"
            assert text.get_position()[1] == pytest.approx(
                (math.log10(value) - low) / (high - low))
        assert len(first) >= 2
    else:                                               # grid values: ticks at its points
        assert {"0.03", "0.1", "0.3", "64", "256"} <= labels
        assert dims["layers"].tickformat == "d"


@pytest.mark.mpi
def test_slice(study):
    from diel.plot.render_mpl import figure as mpl_figure
    from diel.plot.render_plotly import figure as plotly_figure

    data = figure_data(study, "slice")
    ok = trials(study, "ok")
    fig = mpl_figure(data)
    panels = [ax for ax in fig.axes if ax.get_xlabel() in PARAMS[study.name]]
    assert [ax.get_xlabel() for ax in panels] == PARAMS[study.name]
    for ax in panels:
        assert len(ax.collections[0].get_offsets()) == len(ok)
        scale = SCALES[study.name][ax.get_xlabel()]
        assert ax.get_xscale() == ("log" if scale == "log" else "linear")
        ticks = [t.get_text() for t in ax.get_xticklabels()]
        if scale == "categorical":
            assert ticks == CHOICES[study.name]
        if scale == "int":
            assert all(float(t).is_integer() for t in ax.get_xticks())
    assert panels[0].get_ylabel() == f"{OBJECTIVE[study.name]} (maximize)"
    plotted = plotly_figure(data)
    layout = plotted.layout
    assert [trace.name for trace in plotted.data] == PARAMS[study.name]
    assert all(len(trace.x) == len(ok) for trace in plotted.data)
    axes = [layout.xaxis] + [layout[f"xaxis{i}"] for i in range(2, len(PARAMS[study.name]) + 1)]
    by_name = {axis.title.text: axis for axis in axes}
    assert list(by_name["activation"].ticktext) == CHOICES[study.name]
    assert (by_name["learning_rate"].type == "log") == (study.name == "mnist_random")
    assert by_name["layers"].tickformat == "d"


@pytest.mark.mpi
def test_importance(study):
    from diel.plot.render_mpl import figure as mpl_figure
    from diel.plot.render_plotly import figure as plotly_figure

    data = figure_data(study, "importance")
    found = {item["name"]: item["importance"] for item in data["importances"]}
    assert set(found) == set(PARAMS[study.name])
    assert sum(found.values()) == pytest.approx(1.0)
    assert list(found.values()) == sorted(found.values(), reverse=True)
    assert data["trials"] == len(trials(study, "ok")) and "fANOVA" in data["method"]
    assert figure_data(study, "importance") == data      # seeded: the same every time
    ax = mpl_figure(data).axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == list(found)[::-1]
    assert [p.get_width() for p in ax.patches] == pytest.approx(list(found.values())[::-1])
    assert list(plotly_figure(data).data[0].y) == list(found)[::-1]


@pytest.mark.mpi
def test_importance_says_how_much_the_parameters_explain(study):
    """The shares sum to 1 even for an objective the parameters do not decide: the
    forest's out-of-bag R² beside them says which case it is."""
    from diel.plot.render_mpl import figure as mpl_figure
    from diel.plot.render_plotly import figure as plotly_figure

    import dataclasses
    import random

    ok = trials(study, "ok")
    noise = random.Random(1)
    decided = [{**t, "objective": math.log10(t["params"]["learning_rate"])} for t in ok]
    random_ = [{**t, "objective": noise.random()} for t in ok]
    signal = figure_data(dataclasses.replace(study, trials=tuple(decided)), "importance")
    assert signal["explained"] > 0.5, signal["explained"]
    assert signal["importances"][0]["name"] == "learning_rate"
    assert f"R² {signal['explained']:.2f}: the parameters predict" in \
        mpl_figure(signal).axes[0].get_title()
    blind = figure_data(dataclasses.replace(study, trials=tuple(random_)), "importance")
    assert blind["explained"] < 0.1, blind["explained"]
    assert "the shares may be noise" in mpl_figure(blind).axes[0].get_title()
    assert "the shares may be noise" in plotly_figure(blind).layout.title.text
    few = figure_data(dataclasses.replace(study, trials=tuple(decided[:9])), "importance")
    assert few["explained"] is None
    assert "too few ok trials to tell" in mpl_figure(few).axes[0].get_title()


@pytest.mark.mpi
def test_importance_of_many_trials_is_computed_over_a_seeded_sample(study):
    from diel.plot.render_mpl import figure as mpl_figure
    from diel.plot.render_plotly import figure as plotly_figure

    ok = len(trials(study, "ok"))
    most = ok // 2
    data = figure_data(study, "importance", importance_trials=most)
    assert (data["trials"], data["ok_trials"]) == (most, ok)
    assert figure_data(study, "importance", importance_trials=most) == data   # seeded
    said = f"over a random sample of {most:,} of {ok:,} ok trials"
    assert said in mpl_figure(data).axes[0].get_title()
    assert said in plotly_figure(data).layout.title.text
    every = figure_data(study, "importance", importance_trials=None)
    assert every["trials"] == every["ok_trials"] == ok
    assert f"over {ok} ok trials" in mpl_figure(every).axes[0].get_title()
    with pytest.raises(ValueError, match="needs at least 2 trials; 1 were allowed"):
        figure_data(study, "importance", importance_trials=1)


@pytest.mark.mpi
def test_curves_mark_the_pruned_trials(study):
    from matplotlib.collections import LineCollection, PathCollection
    from matplotlib.colors import to_hex

    from diel.plot.render_mpl import figure as mpl_figure
    from diel.plot.render_plotly import figure as plotly_figure

    data = figure_data(study, "curves")
    assert data["metrics"] == ["accuracy", "loss"]
    assert [t["number"] for t in data["trials"]] == [t["number"] for t in study.trials]
    pruned = trials(study, "pruned")
    assert (study.name == "mnist_random") == bool(pruned)   # the random search prunes
    for trial, row in zip(data["trials"], study.trials):
        assert trial["epochs"][-1] == row["epoch"]
        assert trial["values"]["accuracy"][-1] == pytest.approx(row["accuracy"])
    fig = mpl_figure(data)
    accuracy, loss = fig.axes
    assert (accuracy.get_ylabel(), loss.get_ylabel(), loss.get_xlabel()) == \
        ("accuracy", "loss", "epoch")
    collections = {to_hex(c.get_color()[0]): c for c in accuracy.collections
                   if isinstance(c, LineCollection)}
    lines = collections[STATUS_COLOURS["ok"]].get_segments()
    assert len(lines) == len(trials(study, "ok"))   # a line per trial, in one collection
    assert [len(line) for line in lines] == [len(t["epochs"]) for t in data["trials"]
                                             if t["status"] == "ok"]
    crosses = [c for c in accuracy.collections if isinstance(c, PathCollection)]
    if pruned:
        dashed = collections[STATUS_COLOURS["pruned"]]
        assert len(dashed.get_segments()) == len(pruned)
        assert dashed.get_linestyle()[0][1] is not None          # dashed, not solid
        assert len(crosses) == 1 and len(crosses[0].get_offsets()) == len(pruned)
    else:
        assert crosses == []
    assert accuracy.get_ylim()[0] <= min(t["accuracy"] for t in study.trials)  # all in view
    traces = plotly_figure(data).data
    assert len(traces) == 2 * (1 + bool(pruned))   # a trace per metric and status
    points = [t for t in traces if t.yaxis == "y"]
    assert sum(x is not None for t in points for x in t.x) == \
        sum(len(t["epochs"]) for t in data["trials"])
    assert sum(t.line.dash == "dash" for t in traces) == 2 * bool(pruned)
    assert sum(symbol == "x" for t in points for symbol in t.marker.symbol) == len(pruned)
    epochs = plotly_figure(data).layout.xaxis2
    assert list(epochs.tickvals) == list(range(1, max(t["epoch"] for t in study.trials) + 1))


@pytest.mark.mpi
def test_timeline_bars_per_copy(study):
    from matplotlib.colors import to_hex

    from diel.plot.render_mpl import figure as mpl_figure
    from diel.plot.render_plotly import figure as plotly_figure

    data = figure_data(study, "timeline")
    assert data["workers"] == [0, 1]
    assert sorted(b["number"] for b in data["trials"]) == [t["number"] for t in study.trials]
    for worker in data["workers"]:
        bars = sorted((b for b in data["trials"] if b["worker"] == worker),
                      key=lambda b: b["start"])
        assert all(b["end"] >= b["start"] >= 0 for b in bars)
        assert all(later["start"] >= earlier["end"] - 1e-6
                   for earlier, later in zip(bars, bars[1:]))   # one trial at a time
    ax = mpl_figure(data).axes[0]
    rows = ax.collections                     # a row of bars per worker copy
    assert len(rows) == len(data["workers"])
    for row, worker in zip(rows, data["workers"]):
        mine = [b for b in data["trials"] if b["worker"] == worker]
        assert [to_hex(colour) for colour in row.get_facecolor()] == \
            [STATUS_COLOURS[b["status"]] for b in mine]
        assert [path.vertices[:, 0].min() for path in row.get_paths()] == \
            pytest.approx([b["start"] for b in mine])
    statuses = [b["status"] for b in data["trials"]]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["copy 0", "copy 1"]
    bars = plotly_figure(data).data
    assert sum(len(trace.x) for trace in bars) == len(study.trials)
    assert {trace.name.split()[0] for trace in bars} == set(statuses)


@pytest.mark.mpi
def test_pareto_needs_several_objectives(study):
    with pytest.raises(ValueError, match="has one objective.*needs a study of several"):
        figure_data(study, "pareto")


def test_pareto_front_matches_diel_results(synthetic):
    from diel.plot.render_mpl import figure as mpl_figure
    from diel.plot.render_plotly import figure as plotly_figure

    with diel.results.open(synthetic) as results:
        study = load_study(results, "tradeoff")
        expected = sorted(t["number"] for t in results.pareto(study="tradeoff"))
    data = figure_data(study, "pareto")
    assert [o["expression"] for o in data["objectives"]] == ["accuracy", "time"]
    assert sorted(t["number"] for t in data["trials"] if t["front"]) == expected == [0, 1, 3]
    ax = mpl_figure(data).axes[0]
    assert ax.get_xlabel() == "accuracy (maximize)" and ax.get_ylabel() == "time (minimize)"
    front = [line for line in ax.get_lines() if line.get_label().startswith("Pareto front")]
    assert len(front[0].get_xdata()) == 3
    assert len(ax.collections[0].get_offsets()) == 3            # the other ok trials
    traces = {trace.name: trace for trace in plotly_figure(data).data}
    assert sorted(traces["Pareto front (3)"].x) == [0.8, 0.9, 0.95]
    swapped = figure_data(study, "pareto", objectives=["time", "accuracy"])
    assert [o["expression"] for o in swapped["objectives"]] == ["time", "accuracy"]
    assert figure_data(study, "history", objectives=["time"])["best"][-1]["value"] == 5.0


@pytest.mark.parametrize("kind", ["history", "parallel", "importance", "slice", "curves",
                                  "timeline"])
def test_a_study_with_no_finished_trial_has_nothing_to_plot(synthetic, kind):
    with diel.results.open(synthetic) as results:
        study = load_study(results, "waiting", epochs=True)
    with pytest.raises(ValueError, match="has no finished trial yet \\(1 running\\)"):
        figure_data(study, kind)


def test_a_study_of_failed_trials_has_no_objective_to_plot(synthetic):
    with diel.results.open(synthetic) as results:
        study = load_study(results, "broken", epochs=True)
    with pytest.raises(ValueError, match="no ok trial with a value of 'accuracy' \\(1 failed\\)"):
        figure_data(study, "history")
    assert figure_data(study, "timeline")["trials"][0]["status"] == "failed"
