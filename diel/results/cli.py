"""The ``diel results`` and ``diel studies`` subcommands.

``diel/cli.py`` calls :func:`register` with its subparsers; each subcommand's ``func``
takes the parsed arguments and returns the exit code: 0 on success, 2 on a usage error
(malformed ``--where``, a key or study the database does not have, a missing file, a
file that is not a diel results database, a URL naming no dialect or a driver that is
not installed, ``--pareto`` on a study of one objective or naming an objective the study
does not have, a ``--lineage`` trial the database does not have, ...) after one line on stderr, 1 when the database itself fails. Both
only read: the database is opened read-only (see :mod:`diel.results._query`).
"""

from __future__ import annotations

import argparse
import sys

from diel.errors import ResultsError
from diel.results._format import FORMATS, format_studies, format_trials
from diel.results._numbers import whole_number_type
from diel.results._status import STATUSES

__all__ = ["register", "run_results", "run_studies", "usage_error", "database_error"]


def _database_parent() -> argparse.ArgumentParser:
    """Options both subcommands share."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("db", metavar="DB",
                        help="results database: a SQLite file path or a SQLAlchemy URL "
                             "(e.g. postgresql+psycopg://user@host/db)")
    parent.add_argument("--format", choices=FORMATS, default="table",
                        help="output format (default: table)")
    return parent


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``results`` and ``studies`` subcommands to ``subparsers``."""
    parent = _database_parent()
    results = subparsers.add_parser(
        "results", parents=[parent], help="list the trials of a search",
        description="List trials from a results database, best objective first unless "
                    "--sort says otherwise.")
    results.add_argument("--study", metavar="NAME",
                         help="only this study (default: every study in DB)")
    results.add_argument("--top", metavar="N", type=whole_number_type(1),
                         help="show only the first N trials after sorting")
    results.add_argument("--sort", metavar="KEY",
                         help="sort by KEY, KEY:asc or KEY:desc; KEY is a column (objective, "
                              "accuracy, loss, time, number, ...), a parameter or a metric "
                              "name (default: best objective first)")
    results.add_argument("--status", choices=STATUSES, help="only trials with this status")
    results.add_argument("--where", metavar="FILTER", action="append", default=[],
                         help="keep trials matching KEY OP VALUE (OP: = != < <= > >=), e.g. "
                              "'learning_rate<0.1', 'activation=relu', 'accuracy>=0.9'; "
                              "a quoted VALUE is a string (batch='\"16\"'), an unquoted "
                              "one a number when it reads as one (1e-3, .5), true, false "
                              "and null what JSON means; repeatable, all must hold; an "
                              "unknown KEY, or a VALUE of a type KEY never holds, is an "
                              "error that says what there is")
    results.add_argument("--pareto", action="store_true",
                         help="list only the Pareto front of a study of several objectives: "
                              "its ok trials (among those --where keeps) that no other "
                              "dominates, best first in its first objective")
    results.add_argument("--objective", metavar="EXPR", action="append", default=[],
                         help="with --pareto: build the front over this objective of the "
                              "study (its expression as in the settings); repeatable "
                              "(default: every objective of the study)")
    results.add_argument("--lineage", metavar="TRIAL", type=whole_number_type(0),
                         help="print the schedule of trial number TRIAL instead of a list "
                              "of trials: a line per segment of a population-based "
                              "training member (the steps it spans, the trial and step "
                              "it was copied from, the parameters that changed); --study "
                              "names the study when several have a trial TRIAL")
    results.set_defaults(func=run_results)
    studies = subparsers.add_parser(
        "studies", parents=[parent], help="list the studies in a results database",
        description="List the studies in a results database with their trial counts.")
    studies.set_defaults(func=run_studies)


_NOT_WITH_LINEAGE = ("top", "sort", "status", "where", "pareto", "objective")


def run_results(args: argparse.Namespace) -> int:
    """``diel results``: print the selected trials, or one trial's lineage; returns the
    exit code."""
    if args.lineage is not None:
        return _run_lineage(args)
    if args.objective and not args.pareto:
        return usage_error("results",
                           "--objective chooses the objectives of --pareto; add --pareto")
    if args.pareto and args.status not in (None, "ok"):
        return usage_error("results",
                           f"--pareto lists ok trials only, not --status {args.status}")
    from diel.results._query import Results  # SQLAlchemy loads only when a command needs it

    try:
        with Results(args.db) as results:
            if args.pareto:
                rows = results.pareto(study=args.study, objectives=args.objective,
                                      sort=args.sort, where=args.where, top=args.top)
            else:
                rows = results.trials(study=args.study, top=args.top, sort=args.sort,
                                      status=args.status, where=args.where)
    except ValueError as e:
        return usage_error("results", str(e))
    except ResultsError as e:
        return database_error("results", e)
    if not rows and args.format == "table":
        print("no trials match", file=sys.stderr)
        return 0
    print(format_trials(rows, args.format))
    return 0


def _run_lineage(args: argparse.Namespace) -> int:
    """``diel results --lineage TRIAL``: print that trial's segments."""
    given = [f"--{name}" for name in _NOT_WITH_LINEAGE if getattr(args, name)]
    if given:
        return usage_error("results", f"--lineage prints one trial's schedule; it takes "
                                      f"--study and --format, not {', '.join(given)}")
    from diel.results._lineage import format_lineage
    from diel.results._query import Results

    try:
        with Results(args.db) as results:
            with results.snapshot():
                study = results.study_of(args.lineage, args.study)
                segments = results.lineage(args.lineage, study)
    except ValueError as e:
        return usage_error("results", f"--lineage {args.lineage}: {e}")
    except ResultsError as e:
        return database_error("results", e)
    print(format_lineage(segments, args.format, study, args.lineage))
    return 0


def run_studies(args: argparse.Namespace) -> int:
    """``diel studies``: print the studies; returns the exit code."""
    from diel.results._query import Results

    try:
        with Results(args.db) as results:
            rows = results.studies()
    except ResultsError as e:
        return database_error("studies", e)
    print(format_studies(rows, args.format))
    return 0


def usage_error(command: str, message: str) -> int:
    """Say ``diel COMMAND: error: MESSAGE`` on stderr; the exit code of a usage error (2)."""
    print(f"diel {command}: error: {message}", file=sys.stderr)
    return 2


def database_error(command: str, error: ResultsError) -> int:
    """Say the first line of ``error`` as :func:`usage_error` does; the exit code: a
    missing or foreign database is a usage error (2), a failing one 1."""
    text = str(error).splitlines()[0]
    print(f"diel {command}: error: {text}", file=sys.stderr)
    return 2 if error.__cause__ is None else 1
