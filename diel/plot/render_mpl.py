"""Drawing plot data (:mod:`diel.plot.data`) with matplotlib, for PNG and SVG files.

Figures are :class:`matplotlib.figure.Figure` objects made without pyplot: no window,
no global state, and a PNG is drawn by the Agg canvas whatever backend is configured.
Log-scale parameters get log axes, integer ones whole-number ticks, categorical ones
a tick per category. Importing this module without matplotlib raises
:class:`~diel.plot.MissingExtra`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

from diel.plot._extra import require
from diel.plot._style import COLOURMAP, DPI, SIZE, STATUS_COLOURS, edge_offsets, \
    importance_fit, importance_left_out, importance_trials, objective_title

require("matplotlib", "writing PNG and SVG files")

from matplotlib.axes import Axes  # noqa: E402  (after the check that names the extra)
from matplotlib.collections import LineCollection  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import LogLocator, MaxNLocator  # noqa: E402

__all__ = ["figure", "save", "FEW"]

FEW = 6   # a numeric axis with at most this many distinct values is ticked at them


def figure(data: dict[str, Any]) -> Figure:
    """The matplotlib figure of one plot's ``data`` (:func:`diel.plot.figure_data`)."""
    return _DRAW[data["kind"]](data)


def save(data: dict[str, Any], path: str | Path) -> Figure:
    """Draw ``data`` into ``path``, PNG or SVG by its extension; returns the figure."""
    fig = figure(data)
    fig.savefig(path, dpi=DPI)
    return fig


def _new(rows: int = 1, cols: int = 1, size: tuple[float, float] = SIZE,
         **shared: Any) -> tuple[Figure, list[list[Axes]]]:
    fig = Figure(figsize=size, layout="constrained")
    return fig, fig.subplots(rows, cols, squeeze=False, **shared).tolist()


def _place_axis(ax: Axes, axis: dict[str, Any]) -> None:
    """Give ``ax``'s x axis the parameter ``axis``'s scale."""
    ax.set_xlabel(axis["name"])
    if axis["scale"] == "categorical":
        ax.set_xticks(range(len(axis["choices"])), axis["choices"])
        ax.set_xlim(-0.5, len(axis["choices"]) - 0.5)
        return
    if axis["scale"] == "log":
        ax.set_xscale("log")
    elif axis["scale"] == "int":
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    few = _few(axis)
    if few:
        ax.set_xticks(few, [f"{v:.4g}" for v in few])
        ax.minorticks_off()


def _few(axis: dict[str, Any]) -> list[float]:
    """The distinct values of a numeric axis that holds at most :data:`FEW` of them (a
    grid's points: ticks at them read better than round numbers), else none."""
    distinct = sorted(set(axis["values"]) - {None})
    return distinct if len(distinct) <= FEW else []


def _history(data: dict[str, Any]) -> Figure:
    fig, ((ax,),) = _new()
    counts = {}
    for status, marker in (("ok", "o"), ("pruned", "x")):
        points = [t for t in data["trials"] if t["status"] == status]
        counts[status] = len(points)
        if points:
            ax.scatter([t["number"] for t in points], [t["value"] for t in points], s=20,
                       marker=marker, color=STATUS_COLOURS[status], zorder=2,
                       label=f"{status} trials ({len(points)})")
    best = data["best"]
    ax.step([b["number"] for b in best], [b["value"] for b in best], where="post",
            color="#1f77b4", label="best so far")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("trial")
    ax.set_ylabel(objective_title(data["objective"]))
    ax.set_title(f"{data['study']}: objective per trial")
    ax.legend(fontsize=8)
    return fig


MISSING_AT = -0.15   # where a trial without a parameter crosses its parallel axis


def _unit(dim: dict[str, Any]) -> tuple[Callable[[float | None], float],
                                         list[tuple[str, float]]]:
    """For one parallel-coordinates axis: a map of its values onto [0, 1] and its ticks
    (label, height). A trial without the parameter (None: a conditional one) crosses
    the axis at :data:`MISSING_AT`, below its values, ticked ``missing``."""
    place, ticks = _unit_of_values(dim)
    if None not in dim["values"]:
        return place, ticks
    return (lambda v: MISSING_AT if v is None else place(v)), [("missing", MISSING_AT), *ticks]


def _unit_of_values(dim: dict[str, Any]) -> tuple[Callable[[float], float],
                                                   list[tuple[str, float]]]:
    """:func:`_unit` for the values the trials have."""
    if dim["scale"] == "categorical":
        last = max(len(dim["choices"]) - 1, 1)
        return (lambda v: v / last), [(label, i / last) for i, label in enumerate(dim["choices"])]
    log = dim["scale"] == "log"
    present = [v for v in dim["values"] if v is not None]
    low, high = min(present), max(present)
    turn: Callable[[float], float] = math.log10 if log else float
    span = turn(high) - turn(low)

    def place(v: float) -> float:
        return (turn(v) - turn(low)) / span if span > 0 else 0.5
    ticks = _few(dim)
    if not ticks:
        locator = LogLocator(subs=(1.0, 2.0, 5.0)) if log else \
            MaxNLocator(nbins=4, integer=dim["scale"] == "int")
        ticks = [v for v in locator.tick_values(low, high)
                 if low - 1e-9 * abs(low) <= v <= high + 1e-9 * abs(high)]
    if len(ticks) < 2:
        ticks = sorted({low, high})
    return place, [(f"{v:.4g}", place(v)) for v in ticks]


def _parallel(data: dict[str, Any]) -> Figure:
    """A line a trial through its parameters and its objective; a trial without a
    parameter (a conditional one) crosses that axis at its ``missing`` tick, below."""
    dims = [*data["axes"], {"name": data["objective"]["expression"], "scale": "linear",
                            "values": data["values"]}]
    fig, ((ax,),) = _new(size=(max(SIZE[0], 1.5 * len(dims) + 1.5), SIZE[1]))
    units = [_unit(dim) for dim in dims]
    columns = [[place(v) for v in dim["values"]] for dim, (place, _) in zip(dims, units)]
    sign = 1 if data["objective"]["direction"] == "maximize" else -1
    order = sorted(range(len(data["values"])), key=lambda i: sign * data["values"][i])
    rows = list(zip(*columns))   # one row of heights a trial; the best drawn last, on top
    lines = LineCollection([list(zip(range(len(dims)), rows[i])) for i in order],
                           cmap=COLOURMAP, linewidths=1.2, alpha=0.8)
    lines.set_array([data["values"][i] for i in order])
    ax.add_collection(lines)
    fig.colorbar(lines, ax=ax, label=objective_title(data["objective"]))
    for i, (_, ticks) in enumerate(units):
        ax.axvline(i, color="black", linewidth=0.8)
        for label, height in ticks:
            ax.text(i + 0.04, height, label, fontsize=7, va="center")
    ax.set_xticks(range(len(dims)), [dim["name"] for dim in dims])
    ax.set_yticks([])
    ax.set_xlim(-0.15, len(dims) - 0.5)
    missing = any(None in dim["values"] for dim in dims)
    ax.set_ylim(MISSING_AT - 0.05 if missing else -0.05, 1.05)
    ax.set_title(f"{data['study']}: {len(data['values'])} ok trials")
    return fig


def _slice(data: dict[str, Any]) -> Figure:
    panels = data["axes"]
    cols = len(panels) if len(panels) <= 4 else 3
    rows = math.ceil(len(panels) / cols)
    fig, grid = _new(rows, cols, size=(2.8 * cols + 1.2, 2.6 * rows + 0.5), sharey=True)
    flat = [ax for row in grid for ax in row]
    drawn = None
    for ax, panel in zip(flat, panels):
        drawn = ax.scatter(panel["values"], panel["objective_values"], c=panel["numbers"],
                           cmap=COLOURMAP, s=16)
        _place_axis(ax, panel)
    for ax in flat[len(panels):]:
        ax.set_axis_off()
    for row in grid:
        row[0].set_ylabel(objective_title(data["objective"]))
    if drawn is not None:
        fig.colorbar(drawn, ax=flat, label="trial")
    fig.suptitle(f"{data['study']}: objective against each parameter")
    return fig


def _importance(data: dict[str, Any]) -> Figure:
    found = data["importances"][::-1]   # the largest on top
    fig, ((ax,),) = _new(size=(SIZE[0], 1.2 + 0.45 * len(found)))
    ax.barh([item["name"] for item in found], [item["importance"] for item in found],
            color="#1f77b4")
    ax.set_xlabel(f"importance for {data['objective']['expression']} (share of its variance)")
    ax.set_title(f"{data['study']}: parameter importance over {importance_trials(data)}"
                 f"{importance_left_out(data)}\n"
                 f"{data['method']}\n{importance_fit(data)}", fontsize=10)
    return fig


_LINES = {"ok": {"linestyle": "-"}, "pruned": {"linestyle": "--"},
          "failed": {"linestyle": ":"}, "running": {"linestyle": "-."},
          "paused": {"linestyle": (0, (5, 1, 1, 1, 1, 1))}}


def _curves(data: dict[str, Any]) -> Figure:
    """One line collection per metric and status (a line per trial; an epoch that did
    not report the metric leaves a gap) and an x where each pruned trial stopped: a
    collection draws thousands of trials in a second, where a line each took minutes."""
    metrics = data["metrics"]
    fig, grid = _new(len(metrics), 1, size=(SIZE[0], 2.3 * len(metrics) + 0.6), sharex=True)
    by_status = {status: [t for t in data["trials"] if t["status"] == status]
                 for status in STATUS_COLOURS}
    for (ax,), name in zip(grid, metrics):
        for status, chosen in by_status.items():
            if not chosen:
                continue
            ax.add_collection(LineCollection(
                [[(epoch, _nan(value)) for epoch, value in zip(t["epochs"], t["values"][name])]
                 for t in chosen],
                colors=STATUS_COLOURS[status], linewidths=1, alpha=0.7, **_LINES[status]))
            if status == "pruned":   # where each was stopped
                ends = [(t["epochs"][-1], t["values"][name][-1]) for t in chosen
                        if t["values"][name][-1] is not None]
                ax.scatter([x for x, _ in ends], [y for _, y in ends], marker="x", s=36,
                           color=STATUS_COLOURS[status])
        ax.autoscale_view()
        ax.set_ylabel(name)
    grid[-1][0].set_xlabel("epoch")
    grid[-1][0].xaxis.set_major_locator(MaxNLocator(integer=True))
    handles = [Line2D([], [], color=STATUS_COLOURS[status], label=f"{status} ({len(chosen)})",
                      marker="x" if status == "pruned" else "", **_LINES[status])
               for status, chosen in by_status.items() if chosen]
    grid[0][0].legend(handles=handles, fontsize=8)
    fig.suptitle(f"{data['study']}: per-epoch metrics of {len(data['trials'])} trials")
    return fig


def _nan(value: float | None) -> float:
    return math.nan if value is None else value


def _pareto(data: dict[str, Any]) -> Figure:
    fig, ((ax,),) = _new()
    trials = data["trials"]
    others = [t["values"] for t in trials if not t["front"]]
    front = sorted(t["values"] for t in trials if t["front"])
    if others:
        ax.scatter(*zip(*others), s=18, color="#9e9e9e", label=f"other ok trials ({len(others)})")
    ax.plot(*zip(*front), marker="o", markersize=5, linestyle="--", color="#d62728",
            label=f"Pareto front ({len(front)})")
    first, second = data["objectives"]
    ax.set_xlabel(objective_title(first))
    ax.set_ylabel(objective_title(second))
    ax.set_title(f"{data['study']}: Pareto front")
    ax.legend(fontsize=8)
    return fig


def _timeline(data: dict[str, Any]) -> Figure:
    workers = data["workers"]
    fig, ((ax,),) = _new(size=(SIZE[0], 1.4 + 0.4 * len(workers)))
    bars = data["trials"]
    for row, worker in enumerate(workers):   # one collection a copy: fast for 10,000 bars
        mine = [b for b in bars if b["worker"] == worker]
        ax.broken_barh([(b["start"], b["end"] - b["start"]) for b in mine], (row - 0.3, 0.6),
                       facecolors=[STATUS_COLOURS[b["status"]] for b in mine],
                       edgecolor="white", linewidth=0.5)
    ax.set_yticks(range(len(workers)), [f"copy {w}" for w in workers])
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the first trial was dispatched")
    ax.set_title(f"{data['study']}: {len(bars)} trials on {len(workers)} worker copies")
    counts = {status: sum(b["status"] == status for b in bars) for status in STATUS_COLOURS}
    ax.legend(handles=[Line2D([], [], color=STATUS_COLOURS[status], linewidth=6,
                              label=f"{status} ({n})") for status, n in counts.items() if n],
              fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))   # beside: no bar hidden
    return fig


def _place_y(ax: Axes, axis: dict[str, Any]) -> None:
    """Give ``ax``'s y axis the parameter ``axis``'s scale."""
    ax.set_ylabel(axis["name"])
    if axis["scale"] == "categorical":
        ax.set_yticks(range(len(axis["choices"])), axis["choices"])
        ax.set_ylim(-0.5, len(axis["choices"]) - 0.5)
    elif axis["scale"] == "log":
        ax.set_yscale("log")
    elif axis["scale"] == "int":
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))


def _lineage(data: dict[str, Any]) -> Figure:
    """The family tree on top (a row a member, a line a segment, a grey edge from each
    donor at its step to the member it went on in, the best member starred) and a panel
    a parameter below (each member's schedule), every member in one colour throughout:
    collections, so a population of hundreds draws in a second."""
    members, params = data["members"], data["params"]
    tall = 1.2 + 0.18 * len(members)
    fig = Figure(figsize=(SIZE[0], tall + 1.8 * len(params) + 0.6), layout="constrained")
    grid = fig.subplots(1 + len(params), 1, sharex=True, squeeze=False,
                        gridspec_kw={"height_ratios": [tall] + [1.8] * len(params)})
    tree = grid[0][0]
    numbers = [m["number"] for m in members]
    colour = _member_colours(numbers)
    for member in members:
        tree.add_collection(LineCollection(
            [[(s["from_step"], member["number"]), (s["to_step"], member["number"])]
             for s in member["segments"]], colors=colour[member["number"]], linewidths=2.5,
            capstyle="butt", **_LINES.get(member["status"], {})))
    edges = data["edges"]
    if edges:   # in the donor's colour, side by side where several share a step
        span = max(s["to_step"] for m in members for s in m["segments"])
        shift = edge_offsets(edges, span)
        tree.add_collection(LineCollection(
            [[(_from(e) + d, e["donor"]), (e["step"] + d, e["member"])]
             for e, d in zip(edges, shift)],
            colors=[colour.get(e["donor"], "#9e9e9e") for e in edges], linewidths=1.2))
        label: str | None = f"exploits ({len(edges)}), from the donor"
        for down, marker in ((True, "v"), (False, "^")):   # pointing away from the donor
            ends = [(e["step"] + d, e["member"]) for e, d in zip(edges, shift)
                    if (e["donor"] < e["member"]) == down]
            if ends:
                tree.scatter(*zip(*ends), marker=marker, s=24, color="#616161", zorder=3,
                             label=label)
                label = None
    best = next((m for m in members if m["number"] == data["best"]), None)
    if best is not None:
        tree.scatter([best["segments"][-1]["to_step"]], [best["number"]], marker="*", s=160,
                     color="#d62728", zorder=4,
                     label=f"best: trial {best['number']} ({best['value']:.4g})")
    tree.autoscale_view()
    tree.invert_yaxis()
    tree.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=min(len(members), 20)))
    tree.set_ylabel("member (trial)")
    if edges or best is not None:
        tree.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    for (ax,), axis in zip(grid[1:], params):
        ax.add_collection(LineCollection(
            [list(zip(p["steps"], map(_nan, p["values"]))) for p in axis["schedules"]],
            colors=[colour[p["number"]] for p in axis["schedules"]], linewidths=1.5,
            alpha=0.85))
        ax.autoscale_view()
        _place_y(ax, axis)
    grid[-1][0].set_xlabel("step (epoch)")
    grid[-1][0].xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.suptitle(f"{data['study']}: lineage of {len(members)} members, "
                 f"{len(edges)} exploits ({objective_title(data['objective'])})")
    return fig


def _from(edge: dict[str, Any]) -> float:
    """The step an exploit edge leaves its donor at."""
    return edge["donor_step"] if edge["donor_step"] is not None else edge["step"]


def _member_colours(numbers: list[int]) -> dict[int, Any]:
    """A colour a member, from the colour map, in number order."""
    from matplotlib import colormaps

    cmap = colormaps[COLOURMAP]
    last = max(len(numbers) - 1, 1)
    return {number: cmap(0.9 * i / last) for i, number in enumerate(numbers)}


_DRAW: dict[str, Callable[[dict[str, Any]], Figure]] = {
    "history": _history, "parallel": _parallel, "importance": _importance, "slice": _slice,
    "curves": _curves, "pareto": _pareto, "timeline": _timeline, "lineage": _lineage}
