"""Plots of trials with different parameter sets (a conditional space, define-by-run;
tests/helpers/populations.py's ``conditional``): each parameter is drawn over the
trials that have it, and a trial without one is shown as missing, never as zero."""

from __future__ import annotations

import pytest

import diel.results
from diel.plot import figure_data, load_study
from tests.helpers.populations import fill_conditional


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    url = fill_conditional(f"sqlite:///{tmp_path_factory.mktemp('conditional') / 'c.db'}")
    with diel.results.open(url) as results:
        return load_study(results, "conditional")


def test_each_parameter_has_an_axis_from_the_trials_that_have_it(study):
    assert [(a.name, a.scale) for a in study.axes] == [
        ("classifier", "categorical"), ("rf_depth", "int"), ("svc_c", "linear")]


def test_a_slice_draws_each_parameter_over_the_trials_that_have_it(study):
    panels = {p["name"]: p for p in figure_data(study, "slice")["axes"]}
    assert panels["svc_c"]["numbers"] == [0, 3] and panels["svc_c"]["values"] == [0.5, 0.0]
    assert panels["rf_depth"]["numbers"] == [1]
    assert panels["classifier"]["numbers"] == [0, 1, 2, 3]


def test_parallel_coordinates_show_a_missing_parameter_as_missing(study):
    from diel.plot.render_mpl import MISSING_AT, figure as mpl_figure   # where drawn
    from diel.plot.render_plotly import figure as plotly_figure

    data = figure_data(study, "parallel")
    assert data["numbers"] == [0, 1, 2, 3]   # every trial, whatever it lacks
    axes = {a["name"]: a["values"] for a in data["axes"]}
    assert axes["svc_c"] == [0.5, None, None, 0.0] and axes["rf_depth"] == [None, 8, None, None]
    ax = mpl_figure(data).axes[0]
    [lines] = ax.collections[:1]
    heights = {round(y, 3) for segment in lines.get_segments() for _, y in segment}
    assert MISSING_AT in heights   # the trials without svc_c cross its axis there ...
    labels = [t.get_text() for t in ax.texts]
    assert labels.count("missing") == 2 and "0" in labels   # ... ticked; 0 is a value
    dims = {d.label: d for d in plotly_figure(data).data[0].dimensions}
    svc_c = dims["svc_c"]
    level = svc_c.tickvals[0]
    assert svc_c.ticktext[0] == "missing" and level < 0 == min(v for v in svc_c.values
                                                                if v != level)
    assert list(svc_c.values) == [0.5, level, level, 0.0]
    assert dims["rf_depth"].ticktext[0] == "missing" and "missing" not in \
        dims["classifier"].ticktext


def test_importance_is_computed_over_the_parameters_every_trial_has(study):
    from diel.plot.render_mpl import figure as mpl_figure   # where drawn
    from diel.plot.render_plotly import figure as plotly_figure

    data = figure_data(study, "importance")
    assert [i["name"] for i in data["importances"]] == ["classifier"]
    assert data["left_out"] == ["rf_depth", "svc_c"]
    assert "left out, not in every trial: rf_depth, svc_c" in mpl_figure(data).axes[0].get_title()
    assert "left out" in plotly_figure(data).layout.title.text
