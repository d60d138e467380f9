"""The ``diel plot`` subcommand: one plot of one study, to a PNG, SVG, HTML or JSON file.

``diel/cli.py`` calls :func:`register` with its subparsers. Exit status 0 when the file
is written; 2, after one line on stderr, for a usage mistake (an unknown kind, study,
objective, metric or file extension, a study with nothing to plot, a Pareto plot of a
study of one objective, a missing plotting library, a file that is not a diel results
database); 1 when the database itself fails. The database is only read.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Callable

from diel.errors import ResultsError
from diel.plot._kinds import IMPORTANCE_TRIALS, KIND_HELP, WRITERS
from diel.results import whole_number_type
from diel.results.cli import database_error, usage_error

__all__ = ["register", "run_plot"]

_DESCRIPTION = """\
Draw one plot of one study of a results database into FILE: PNG or SVG (matplotlib),
a self-contained HTML page (Plotly, its JavaScript embedded: opens with no network), or
JSON (the plotted data), by FILE's extension. The database is only read.

kinds:
""" + "\n".join(f"  {name:<11} {text}" for name, text in KIND_HELP.items()) + """

Log-scale parameters (logrange, loguniform) get log axes, integer ones whole-number
ticks, categorical ones a tick per category. Needs the plotting extra:
pip install 'diel[plot]'.

examples:
  diel plot results/mnist_grid.db --kind history --out history.png
  diel plot wf.db --study mnist --kind parallel --out parallel.html
  diel plot wf.db --kind curves --metric accuracy --out curves.svg
  diel plot wf.db --kind pareto --objective accuracy --objective time --out front.png
  diel plot pbt.db --kind lineage --out lineage.png
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``plot`` subcommand to ``subparsers``."""
    plot = subparsers.add_parser(
        "plot", help="draw a plot of a study (PNG, SVG, HTML)", description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    plot.add_argument("db", metavar="DB",
                      help="results database: a SQLite file path or a SQLAlchemy URL")
    plot.add_argument("--study", metavar="NAME",
                      help="the study to plot (default: the database's only study)")
    plot.add_argument("--kind", required=True, choices=list(KIND_HELP), metavar="KIND",
                      help=f"what to draw: {', '.join(KIND_HELP)} (see above)")
    plot.add_argument("--out", required=True, metavar="FILE",
                      help=f"the file to write; its extension ({', '.join(WRITERS)}) "
                           "chooses the format")
    plot.add_argument("--objective", metavar="EXPR", action="append", default=[],
                      help="in a study of several objectives: the objective to plot "
                           "(default: the first); for --kind pareto give two (default: "
                           "the first two)")
    plot.add_argument("--metric", metavar="NAME", action="append", default=[],
                      help="for --kind curves: a per-epoch metric to draw, repeatable "
                           "(default: accuracy and loss where recorded, else all)")
    plot.add_argument("--importance-trials", metavar="N", type=_trial_bound,
                      default=IMPORTANCE_TRIALS,
                      help="for --kind importance: past N ok trials, compute over a seeded "
                           f"random sample of N (default {IMPORTANCE_TRIALS}: fANOVA takes "
                           "about 6 s per 1,000 trials, more as they grow; 0: every trial); "
                           "the title says so")
    plot.set_defaults(func=run_plot)


def run_plot(args: argparse.Namespace) -> int:
    """``diel plot``: write one plot; returns the exit code."""
    from diel.plot._extra import MissingExtra

    out = Path(args.out)
    suffix = out.suffix.lower()
    if suffix not in WRITERS:
        return usage_error("plot", f"--out {args.out}: unknown extension "
                                   f"{suffix or '(none)'!r}; use .png or .svg (matplotlib), "
                                   ".html (Plotly, self-contained) or .json (the plotted data)")
    if not out.parent.is_dir():
        return usage_error("plot", f"--out {args.out}: there is no folder {out.parent}")
    try:
        write = _writer(WRITERS[suffix])
        data = _plot_data(args)
    except (ValueError, MissingExtra) as e:
        return usage_error("plot", str(e))
    except ResultsError as e:
        return database_error("plot", e)
    problem = _overwrites_database(args.db, out)
    if problem:
        return usage_error("plot", problem)
    try:
        write(data, out)
    except OSError as e:
        return usage_error("plot", f"cannot write {out}: {e.strerror or e}")
    print(f"wrote {out}: {args.kind} of study {data['study']}")
    return 0


def _plot_data(args: argparse.Namespace) -> dict[str, Any]:
    """Read the study and build the kind's data (SQLAlchemy loads only here)."""
    from diel.plot._study import load_study
    from diel.plot.data import NEEDS_EPOCHS, NEEDS_SEGMENTS, figure_data
    import diel.results

    with diel.results.open(args.db) as results:
        study = load_study(results, args.study, epochs=args.kind in NEEDS_EPOCHS,
                           segments=args.kind in NEEDS_SEGMENTS)
    if args.importance_trials != IMPORTANCE_TRIALS and args.kind != "importance":
        raise ValueError("--importance-trials bounds --kind importance")
    return figure_data(study, args.kind, args.objective, args.metric,
                       args.importance_trials or None)


def _trial_bound(text: str) -> int:
    """``--importance-trials``: 0 (no bound) or a number of trials, at least 2 (and no
    more than the database could hold)."""
    value = whole_number_type(0)(text)
    if value == 1:
        raise argparse.ArgumentTypeError(f"expected 0 (every trial) or at least 2, got {value}")
    return value


def _writer(library: str) -> Callable[[dict[str, Any], Path], Any]:
    """The function writing a plot's data with ``library`` (its import checked now, so a
    missing extra is reported before the database is read)."""
    if library == "matplotlib":
        from diel.plot import render_mpl
        return render_mpl.save
    if library == "plotly":
        from diel.plot import render_plotly
        return render_plotly.save
    return _write_json


def _write_json(data: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(data, indent=1) + "\n")


def _overwrites_database(db: str, out: Path) -> str | None:
    """A message when ``out`` is the SQLite file ``db`` itself."""
    from diel.results import is_sqlite_file, resolve_url

    path = is_sqlite_file(resolve_url(db))
    if path is not None and path.exists() and out.exists() and path.samefile(out):
        return f"--out {out} is the results database itself; choose another file"
    return None
