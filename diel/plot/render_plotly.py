"""Drawing plot data (:mod:`diel.plot.data`) with Plotly, for self-contained HTML files
and for web pages (a Plotly figure's JSON is what ``Plotly.newPlot`` takes).

:func:`save` writes the figure with Plotly's JavaScript embedded in the file
(``include_plotlyjs=True``), so it opens with no network. Log-scale parameters get log
axes (in parallel coordinates, which have none, a log10 axis labelled with the values),
integer ones whole-number ticks, categorical ones a tick per category. Importing this
module without Plotly raises :class:`~diel.plot.MissingExtra`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Sequence

from diel.plot._extra import require
from diel.plot._style import COLOURMAP, DPI, SIZE, STATUS_COLOURS, edge_offsets, \
    importance_fit, importance_left_out, importance_trials, objective_title

require("plotly", "writing HTML files")

import plotly.graph_objects as go  # noqa: E402  (after the check that names the extra)
from plotly.subplots import make_subplots  # noqa: E402

__all__ = ["figure", "save"]

_HEIGHT = int(SIZE[1] * DPI * 1.3)   # pixels: the matplotlib figure's height, a little larger


def figure(data: dict[str, Any]) -> go.Figure:
    """The Plotly figure of one plot's ``data`` (:func:`diel.plot.figure_data`)."""
    return _DRAW[data["kind"]](data)


def save(data: dict[str, Any], path: str | Path) -> go.Figure:
    """Write ``data``'s figure to the HTML file ``path``, Plotly's JavaScript embedded."""
    fig = figure(data)
    fig.write_html(str(path), include_plotlyjs=True, full_html=True)
    return fig


def _layout(fig: go.Figure, title: str, height: int = _HEIGHT, **more: Any) -> go.Figure:
    fig.update_layout(title=title, template="plotly_white", height=height, **more)
    return fig


def _whole_ticks(values: Sequence[float]) -> dict[str, Any]:
    """Axis settings ticking whole numbers only: over a span of a dozen or less, a tick
    at each (Plotly's own ticks there fall at halves, which "d" prints as 1, 2, 2, 3)."""
    out: dict[str, Any] = {"tickformat": "d"}
    if values and max(values) - min(values) <= 12:
        out.update(tickmode="array", tickvals=list(range(int(min(values)), int(max(values)) + 1)))
    return out


def _axis(axis: dict[str, Any]) -> dict[str, Any]:
    """Plotly axis settings for a parameter axis (a log, integer or categorical one)."""
    out: dict[str, Any] = {"title": {"text": axis["name"]}}
    if axis["scale"] == "log":
        out["type"] = "log"
    elif axis["scale"] == "int":
        out.update(_whole_ticks(axis["values"]))
    elif axis["scale"] == "categorical":
        out.update(tickmode="array", tickvals=list(range(len(axis["choices"]))),
                   ticktext=axis["choices"], range=[-0.5, len(axis["choices"]) - 0.5])
    return out


def _history(data: dict[str, Any]) -> go.Figure:
    fig = go.Figure()
    for status, symbol in (("ok", "circle"), ("pruned", "x")):
        points = [t for t in data["trials"] if t["status"] == status]
        if points:
            fig.add_trace(go.Scatter(
                x=[t["number"] for t in points], y=[t["value"] for t in points],
                mode="markers", name=f"{status} trials ({len(points)})",
                marker={"color": STATUS_COLOURS[status], "symbol": symbol}))
    best = data["best"]
    fig.add_trace(go.Scatter(x=[b["number"] for b in best], y=[b["value"] for b in best],
                             mode="lines", line={"shape": "hv", "color": "#1f77b4"},
                             name="best so far"))
    fig.update_xaxes(title_text="trial",
                     **_whole_ticks([t["number"] for t in data["trials"]]))
    fig.update_yaxes(title_text=objective_title(data["objective"]))
    return _layout(fig, f"{data['study']}: objective per trial")


_MISSING = "missing"   # the tick of the level where a trial without a parameter crosses its axis


def _dimension(dim: dict[str, Any]) -> dict[str, Any]:
    """One parallel-coordinates dimension; a log axis is drawn in log10 with the values
    as tick labels. Parcoords lines cannot break, so a trial that does not have the
    parameter (a conditional one) crosses its axis at a level of its own below the
    values, ticked ``missing`` (:func:`_with_missing`)."""
    values = dim["values"]
    if dim["scale"] == "categorical":
        return _with_missing({"label": dim["name"], "values": values,
                              "tickvals": list(range(len(dim["choices"]))),
                              "ticktext": dim["choices"],
                              "range": [0, max(len(dim["choices"]) - 1, 1)]}, 1)
    if dim["scale"] == "log":
        present = [v for v in values if v is not None]
        low, high = math.floor(math.log10(min(present))), math.ceil(math.log10(max(present)))
        decades = list(range(low, high + 1))
        return _with_missing({"label": f"{dim['name']} (log)",
                              "values": [None if v is None else math.log10(v) for v in values],
                              "tickvals": decades,
                              "ticktext": [f"{10.0 ** d:g}" for d in decades]}, 1)
    out = {"label": dim["name"], "values": values}
    if dim["scale"] == "int":
        out["tickformat"] = "d"
    if None in values:   # ticks of its own, to add the missing level's
        present = [v for v in values if v is not None]
        low, high = min(present), max(present)
        ticks = sorted(set(present)) if len(set(present)) <= 6 else \
            [low + (high - low) * i / 4 for i in range(5)]
        out.update(tickvals=ticks, ticktext=[f"{v:.4g}" for v in ticks],
                   range=[low, high] if high > low else [low - 1, high + 1])
        return _with_missing(out, 0.15 * (high - low) if high > low else 1)
    return out


def _with_missing(dim: dict[str, Any], below: float) -> dict[str, Any]:
    """``dim`` (with ``tickvals``, ``ticktext`` and a ``range``, or none of them needed:
    a dimension without missing values is returned as it is) with each None value at a
    level ``below`` the lowest tick, ticked :data:`_MISSING`, and its range stretched to
    show it."""
    if None not in dim["values"]:
        return dim
    level = min(dim["tickvals"]) - below
    high = max(dim.get("range") or dim["tickvals"])
    return {**dim, "values": [level if v is None else v for v in dim["values"]],
            "tickvals": [level, *dim["tickvals"]], "ticktext": [_MISSING, *dim["ticktext"]],
            "range": [level, high]}


def _parallel(data: dict[str, Any]) -> go.Figure:
    dimensions = [_dimension(dim) for dim in data["axes"]]
    dimensions.append({"label": data["objective"]["expression"], "values": data["values"]})
    fig = go.Figure(go.Parcoords(
        line={"color": data["values"], "colorscale": COLOURMAP.capitalize(), "showscale": True,
              "colorbar": {"title": {"text": "objective"}}},
        dimensions=dimensions))
    return _layout(fig, f"{data['study']}: {len(data['values'])} ok trials "
                        f"({objective_title(data['objective'])})")


def _slice(data: dict[str, Any]) -> go.Figure:
    panels = data["axes"]
    cols = len(panels) if len(panels) <= 4 else 3
    rows = math.ceil(len(panels) / cols)
    fig = make_subplots(rows=rows, cols=cols, shared_yaxes=True,
                        horizontal_spacing=0.06, vertical_spacing=0.16)
    for i, panel in enumerate(panels):
        row, col = divmod(i, cols)
        fig.add_trace(go.Scatter(
            x=panel["values"], y=panel["objective_values"], mode="markers", name=panel["name"],
            text=[f"trial {n}" for n in panel["numbers"]], showlegend=False,
            marker={"color": panel["numbers"], "colorscale": COLOURMAP.capitalize(), "size": 7,
                    "showscale": i == 0, "colorbar": {"title": {"text": "trial"}}}),
            row=row + 1, col=col + 1)
        fig.update_xaxes(**_axis(panel), row=row + 1, col=col + 1)
        if col == 0:
            fig.update_yaxes(title_text=objective_title(data["objective"]), row=row + 1, col=1)
    return _layout(fig, f"{data['study']}: objective against each parameter",
                   height=int(_HEIGHT * 0.75 * rows) + 80)


def _importance(data: dict[str, Any]) -> go.Figure:
    found = data["importances"][::-1]   # Plotly draws the first bar at the bottom
    fig = go.Figure(go.Bar(x=[item["importance"] for item in found],
                           y=[item["name"] for item in found], orientation="h",
                           marker={"color": "#1f77b4"}))
    fig.update_xaxes(title_text=f"importance for {data['objective']['expression']} "
                                "(share of its variance)")
    return _layout(fig, f"{data['study']}: parameter importance over "
                        f"{importance_trials(data)}{importance_left_out(data)}"
                        f"<br><sub>{data['method']}<br>"
                        f"{importance_fit(data)}</sub>",
                   height=190 + 40 * len(found), margin={"t": 110})


_DASH = {"ok": "solid", "pruned": "dash", "failed": "dot", "running": "dashdot",
         "paused": "longdashdot"}


def _curves(data: dict[str, Any]) -> go.Figure:
    """One trace per metric and status, its trials joined end to end with a gap (None)
    between them, each point hovering as its trial: a trace per trial made a page of
    thousands of trials take half a minute to write and megabytes to open."""
    metrics = data["metrics"]
    fig = make_subplots(rows=len(metrics), cols=1, shared_xaxes=True, vertical_spacing=0.06)
    for row, name in enumerate(metrics, start=1):
        for status in STATUS_COLOURS:
            chosen = [t for t in data["trials"] if t["status"] == status]
            if not chosen:
                continue
            x: list[Any] = []
            y: list[Any] = []
            hover: list[str] = []
            stops: list[bool] = []
            for trial in chosen:
                values = trial["values"][name]
                x += [*trial["epochs"], None]
                y += [*values, None]
                hover += [f"trial {trial['number']} ({status})"] * (len(values) + 1)
                stops += [status == "pruned" and i == len(values) - 1
                          for i in range(len(values))] + [False]
            fig.add_trace(go.Scatter(
                x=x, y=y, mode="lines+markers", name=f"{status} ({len(chosen)})",
                legendgroup=status, showlegend=row == 1, hovertext=hover, hoverinfo="text+x+y",
                line={"color": STATUS_COLOURS[status], "dash": _DASH[status], "width": 1},
                marker={"symbol": ["x" if stop else "circle" for stop in stops],
                        "size": [9 if stop else 3 for stop in stops]},
                opacity=0.75), row=row, col=1)
        fig.update_yaxes(title_text=name, row=row, col=1)
    fig.update_xaxes(title_text="epoch", row=len(metrics), col=1,
                     **_whole_ticks([e for t in data["trials"] for e in t["epochs"]]))
    return _layout(fig, f"{data['study']}: per-epoch metrics of {len(data['trials'])} trials "
                        "(pruned: dashed, x where stopped)",
                   height=180 * len(metrics) + 120)


def _pareto(data: dict[str, Any]) -> go.Figure:
    trials = data["trials"]
    fig = go.Figure()
    for on_front, name, colour, mode in ((False, "other ok trials", "#9e9e9e", "markers"),
                                        (True, "Pareto front", "#d62728", "lines+markers")):
        chosen = sorted((t["values"], t["number"]) for t in trials if t["front"] == on_front)
        if chosen:
            fig.add_trace(go.Scatter(
                x=[v[0] for v, _ in chosen], y=[v[1] for v, _ in chosen], mode=mode,
                name=f"{name} ({len(chosen)})", text=[f"trial {n}" for _, n in chosen],
                marker={"color": colour}, line={"dash": "dash", "color": colour}))
    first, second = data["objectives"]
    fig.update_xaxes(title_text=objective_title(first))
    fig.update_yaxes(title_text=objective_title(second))
    return _layout(fig, f"{data['study']}: Pareto front")


def _timeline(data: dict[str, Any]) -> go.Figure:
    fig = go.Figure()
    for status, colour in STATUS_COLOURS.items():
        bars = [b for b in data["trials"] if b["status"] == status]
        if bars:
            fig.add_trace(go.Bar(
                base=[b["start"] for b in bars], x=[b["end"] - b["start"] for b in bars],
                y=[f"copy {b['worker']}" for b in bars], orientation="h",
                name=f"{status} ({len(bars)})", marker={"color": colour},
                text=[f"trial {b['number']}" for b in bars], textposition="none"))
    labels = [f"copy {w}" for w in data["workers"]]
    fig.update_yaxes(categoryorder="array", categoryarray=labels[::-1])
    fig.update_xaxes(title_text="seconds since the first trial was dispatched")
    return _layout(fig, f"{data['study']}: {len(data['trials'])} trials on "
                        f"{len(data['workers'])} worker copies", barmode="overlay",
                   height=160 + 50 * len(labels))


def _lineage(data: dict[str, Any]) -> go.Figure:
    """The family tree on top (a trace a member, its segments joined with gaps; one
    trace of grey edges from each donor at its step to the member it went on in; the
    best member starred) and a panel a parameter below (each member's schedule, in the
    member's colour, hovering as its trial)."""
    from plotly.colors import sample_colorscale

    members, params = data["members"], data["params"]
    tall = 1.2 + 0.18 * len(members)
    fig = make_subplots(rows=1 + len(params), cols=1, shared_xaxes=True, vertical_spacing=0.05,
                        row_heights=[tall] + [1.8] * len(params))
    last = max(len(members) - 1, 1)
    colours = dict(zip([m["number"] for m in members], sample_colorscale(
        COLOURMAP.capitalize(), [0.9 * i / last for i in range(len(members))])))
    for member in members:
        x: list[Any] = []
        for segment in member["segments"]:
            x += [segment["from_step"], segment["to_step"], None]
        fig.add_trace(go.Scatter(
            x=x, y=[member["number"] if v is not None else None for v in x], mode="lines",
            line={"color": colours[member["number"]], "width": 4, "dash": _DASH[member["status"]]},
            name=f"trial {member['number']}", legendgroup=str(member["number"]),
            showlegend=False, hovertext=f"trial {member['number']} ({member['status']})",
            hoverinfo="text+x"), row=1, col=1)
    edges = data["edges"]
    if edges:   # side by side where several share a step, pointing away from the donor
        span = max(s["to_step"] for m in members for s in m["segments"])
        x, y, symbols = [], [], []
        for e, d in zip(edges, edge_offsets(edges, span)):
            start = e["donor_step"] if e["donor_step"] is not None else e["step"]
            x += [start + d, e["step"] + d, None]
            y += [e["donor"], e["member"], None]
            symbols += ["circle", "triangle-down" if e["donor"] < e["member"] else
                        "triangle-up", "circle"]
        fig.add_trace(go.Scatter(
            x=x, y=y, mode="lines+markers", name=f"exploits ({len(edges)}), from the donor",
            line={"color": "#9e9e9e", "width": 1},
            marker={"symbol": symbols, "size": [0, 9, 0] * len(edges), "color": "#616161"},
            hovertext=[f"trial {e['member']} copies trial {e['donor']} at step {e['step']}"
                       for e in edges for _ in range(3)], hoverinfo="text"), row=1, col=1)
    best = next((m for m in members if m["number"] == data["best"]), None)
    if best is not None:
        fig.add_trace(go.Scatter(
            x=[best["segments"][-1]["to_step"]], y=[best["number"]], mode="markers",
            marker={"symbol": "star", "size": 16, "color": "#d62728"},
            name=f"best: trial {best['number']} ({best['value']:.4g})"), row=1, col=1)
    fig.update_yaxes(title_text="member (trial)", autorange="reversed", tickformat="d",
                     row=1, col=1)
    for row, axis in enumerate(params, start=2):
        for schedule in axis["schedules"]:
            fig.add_trace(go.Scatter(
                x=schedule["steps"], y=schedule["values"], mode="lines", showlegend=False,
                line={"color": colours[schedule["number"]], "width": 2},
                legendgroup=str(schedule["number"]),
                hovertext=f"trial {schedule['number']}", hoverinfo="text+x+y"), row=row, col=1)
        values = [v for schedule in axis["schedules"] for v in schedule["values"] if v is not None]
        fig.update_yaxes(**_axis({**axis, "values": values}), row=row, col=1)
    fig.update_xaxes(title_text="step (epoch)", row=1 + len(params), col=1)
    return _layout(fig, f"{data['study']}: lineage of {len(members)} members, {len(edges)} "
                        f"exploits ({objective_title(data['objective'])})",
                   height=int(60 * tall + 150 * len(params) + 120))


_DRAW: dict[str, Callable[[dict[str, Any]], go.Figure]] = {
    "history": _history, "parallel": _parallel, "importance": _importance, "slice": _slice,
    "curves": _curves, "pareto": _pareto, "timeline": _timeline, "lineage": _lineage}
