"""The ``diel dashboard`` subcommand: serve the dashboard of a results database.

``diel/cli.py`` calls :func:`register` with its subparsers. Before serving, the
libraries of the ``dashboard`` extra are checked, the database opened read-only (a
missing file or one that is not a diel results database is refused, as ``diel
results`` refuses it) and the address bound: each failure is one line on stderr and
exit status 2 (1 when the database itself fails). Then the server runs until Ctrl-C
(exit 0). It binds 127.0.0.1 unless ``--host`` says otherwise: the page shows
everything the database holds, to whoever can reach it.
"""

from __future__ import annotations

import argparse
import importlib.util
import socket
import sys
from typing import TYPE_CHECKING

from diel.errors import ResultsError
from diel.results.cli import _failed, _usage

if TYPE_CHECKING:
    from diel.results._query import Results

__all__ = ["register", "run_dashboard", "EXTRA", "INSTALL"]

EXTRA = ("starlette", "uvicorn", "plotly")   # the dashboard extra's libraries, by import name
INSTALL = "pip install 'diel[dashboard]'"

_DESCRIPTION = """\
Serve a live, read-only web page of the results database DB: its studies, a sortable and
filterable table of a study's trials, its plots (those of 'diel plot'), each trial's
per-epoch curves and the worker copies that ran them. The page follows a running search:
it asks every 2 s whether the study changed and then shows the new trials, without a
reload. The database is opened read-only and never written; a search writing it is not
held up.

examples:
  diel dashboard results/mnist_grid.db                 # then open http://127.0.0.1:8050/
  diel dashboard wf.db --port 9000
  diel dashboard wf.db --host 0.0.0.0                  # reachable from other machines
  diel dashboard postgresql+psycopg://user@host/db

Needs the dashboard extra: pip install 'diel[dashboard]'.
"""


def _port(text: str) -> int:
    """An argparse type: a TCP port, 0 (any free port) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, got {value}")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``dashboard`` subcommand to ``subparsers``."""
    dashboard = subparsers.add_parser(
        "dashboard", help="serve a live web page of a results database (read-only)",
        description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    dashboard.add_argument("db", metavar="DB",
                           help="results database: a SQLite file path or a SQLAlchemy URL")
    dashboard.add_argument("--host", default="127.0.0.1",
                           help="the address to listen on (default: 127.0.0.1, this machine "
                                "only; 0.0.0.0 for every interface)")
    dashboard.add_argument("--port", type=_port, default=8050,
                           help="the TCP port (default: 8050; 0: any free port, printed)")
    dashboard.set_defaults(func=run_dashboard)


def _missing_extra() -> list[str]:
    return [name for name in EXTRA if importlib.util.find_spec(name) is None]


def _listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host``:``port`` (OSError when it cannot be had)."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def run_dashboard(args: argparse.Namespace) -> int:
    """``diel dashboard``: serve until interrupted; returns the exit code."""
    missing = _missing_extra()
    if missing:
        return _usage("dashboard", f"the dashboard needs {', '.join(missing)}, not installed; "
                                   f"install the dashboard extra: {INSTALL}")
    from diel.results._query import Results

    try:
        results = Results(args.db)
    except ResultsError as e:
        return _failed("dashboard", e)
    try:
        return _serve(results, args.host, args.port)
    finally:
        results.close()


def _serve(results: Results, host: str, port: int) -> int:
    """Bind, announce the address on stdout, serve until Ctrl-C."""
    import threading

    import uvicorn

    from diel.dashboard.app import create_app, prepare

    try:
        sock = _listen(host, port)
    except OSError as e:
        return _usage("dashboard", f"cannot listen on {host} port {port}: "
                                   f"{e.strerror or e}; choose another with --port/--host")
    try:
        app = create_app(results)
        threading.Thread(target=prepare, args=(app,), name="prepare", daemon=True).start()
        print(f"diel dashboard: {results.db.label} at {_url(sock)} "
              "(read-only; Ctrl-C stops it)", flush=True)
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False,
                                               lifespan="off"))
        server.run(sockets=[sock])
    except KeyboardInterrupt:   # uvicorn shut down cleanly, then passed the signal on
        pass
    finally:
        sock.close()
    print("diel dashboard: stopped", file=sys.stderr)
    return 0
