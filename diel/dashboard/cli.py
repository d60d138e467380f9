"""The ``diel dashboard`` subcommand: serve the dashboard of a results database.

``diel/cli.py`` calls :func:`register` with its subparsers. Before serving, the
options are checked (a malformed token, an empty host, ``--socket`` with ``--host`` or
``--port``), the libraries of the ``dashboard`` extra, the database opened read-only (a
missing file or one that is not a diel results database is refused, as ``diel results``
refuses it) and the address bound (``--no-token`` on an address other than loopback is
refused there, by the address really bound): each failure is one line on stderr and exit
status 2 (1 when the database itself fails). Then the server runs until Ctrl-C or SIGTERM
(exit 0, the file of ``--socket`` removed).

The page shows everything the database holds, so only the holder of its token reads it
(:mod:`diel.dashboard.access`): a random one unless ``--token`` or
``$DIEL_DASHBOARD_TOKEN`` gives one, printed in the address the command announces.
``--no-token`` serves it to whoever reaches the address, and only on loopback. It binds
127.0.0.1 unless ``--host`` says otherwise, or a Unix socket of mode 0600 (``--socket``)
that SSH forwards to a laptop.
"""

from __future__ import annotations

import argparse
import importlib.util
import ipaddress
import os
import re
import secrets
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from diel.errors import ResultsError
from diel.results import whole_number_type
from diel.results.cli import database_error, usage_error

if TYPE_CHECKING:
    from diel.results import Results

__all__ = ["register", "run_dashboard", "EXTRA", "INSTALL"]

EXTRA = ("starlette", "uvicorn", "plotly")   # the dashboard extra's libraries, by import name
INSTALL = "pip install 'diel[dashboard]'"
TOKEN_ENV = "DIEL_DASHBOARD_TOKEN"   # --token's default, which ps does not show
_HOST, _PORT = "127.0.0.1", 8050
_FORWARDED_PORT = 8050   # the laptop's port the printed ssh line for --socket uses
_TOKEN = re.compile(r"[A-Za-z0-9._~-]{16,256}")   # what a URL carries as it is

_DESCRIPTION = """\
Serve a live, read-only web page of the results database DB: its studies, a sortable and
filterable table of a study's trials, its plots (those of 'diel plot'), each trial's
per-epoch curves and the worker copies that ran them. The page follows a running search:
it asks every 2 s whether the study changed and then shows the new trials, without a
reload. The database is opened read-only and never written; a search writing it is not
held up.

Only the holder of its token reads it: the address printed at start carries a random
one (http://127.0.0.1:8050/?token=...); the first visit keeps it in a cookie. Reach it
from a laptop over SSH: 'ssh -L 8050:127.0.0.1:8050 login-node', then open the printed
address; or serve a Unix socket only you can open and forward that.

examples:
  diel dashboard results/mnist_grid.db                 # then open the address it prints
  diel dashboard wf.db --port 9000
  diel dashboard wf.db --host 0.0.0.0                  # reachable from other machines
  diel dashboard wf.db --socket ~/dash.sock            # ssh -L 8050:$HOME/dash.sock host
  DIEL_DASHBOARD_TOKEN=... diel dashboard wf.db        # a token of your own
  diel dashboard postgresql+psycopg://user@host/db

Needs the dashboard extra: pip install 'diel[dashboard]'.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``dashboard`` subcommand to ``subparsers``."""
    dashboard = subparsers.add_parser(
        "dashboard", help="serve a live web page of a results database (read-only)",
        description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    dashboard.add_argument("db", metavar="DB",
                           help="results database: a SQLite file path or a SQLAlchemy URL")
    dashboard.add_argument("--host", type=_host,
                           help=f"the address to listen on (default: {_HOST}, this machine "
                                "only; 0.0.0.0 for every interface)")
    dashboard.add_argument("--port", type=whole_number_type(0, 65535),
                           help=f"the TCP port (default: {_PORT}; 0: any free port, printed)")
    dashboard.add_argument("--socket", metavar="PATH",
                           help="listen on a new Unix socket PATH, which only you can open "
                                "(mode 0600), instead of a TCP port: forward it from a "
                                "laptop with 'ssh -L 8050:PATH host'; removed on exit")
    access = dashboard.add_mutually_exclusive_group()
    access.add_argument("--token", metavar="TOKEN",
                        help="the token a browser must show (16 or more of A-Z a-z 0-9 - _ "
                             f". ~; default: ${TOKEN_ENV} if set, which unlike an option "
                             "ps does not show, else a random one); the printed address "
                             "carries it")
    access.add_argument("--no-token", action="store_true",
                        help="serve without a token: whoever reaches the address reads the "
                             "database; only on a machine no one else uses, and refused "
                             "with a --host other than loopback")
    dashboard.set_defaults(func=run_dashboard)


def _missing_extra() -> list[str]:
    return [name for name in EXTRA if importlib.util.find_spec(name) is None]


def _token(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """The token to serve with (None: ``--no-token``) and what is wrong with a chosen one
    (None: nothing): ``--token``, else ``$DIEL_DASHBOARD_TOKEN``, else a random one."""
    if args.no_token:
        return None, None
    chosen, source = args.token, "--token"
    if chosen is None:
        chosen, source = os.environ.get(TOKEN_ENV) or None, TOKEN_ENV
    if chosen is None:
        return secrets.token_urlsafe(32), None
    if _TOKEN.fullmatch(chosen):
        return chosen, None
    others = "".join(sorted(set(re.sub(r"[A-Za-z0-9._~-]", "", chosen))))
    return chosen, (f"{source}: a token is 16 to 256 of the characters A-Z a-z 0-9 - _ . ~ "
                    "(e.g. python -c 'import secrets; print(secrets.token_urlsafe())'), got "
                    f"{len(chosen)} characters" + (f", among them {others!r}" if others else ""))


def _host(text: str) -> str:
    """An argparse type: a non-empty host (an empty one would bind every interface)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected an address or a host name, got {text!r}")
    return text


def _loopback(sock: socket.socket) -> bool:
    """Whether ``sock`` is bound to a loopback address (127.0.0.0/8, ::1): not 0.0.0.0,
    a network interface, or a name of this machine that resolves to one."""
    return ipaddress.ip_address(sock.getsockname()[0].split("%")[0]).is_loopback


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


def _listen_unix(path: str) -> socket.socket:
    """A Unix socket listening at the new file ``path``, which only this user may open:
    mode 0600 from its creation (the umask is set around the bind). OSError when it
    cannot be had; FileExistsError when something is at ``path`` already."""
    if os.path.lexists(path):
        raise FileExistsError(f"{path} exists (a dashboard serving it, or one that was "
                              "killed: remove it)")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        mask = os.umask(0o177)
        try:
            sock.bind(path)
        finally:
            os.umask(mask)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def _announcement(label: str, sock: socket.socket, path: str | None,
                  token: str | None) -> str:
    """The line saying where the dashboard is: its address with the token, or for a
    Unix socket how to forward it and the address to open then."""
    login = f"?token={token}" if token else ""
    if path is None:
        open_to = "" if token else "; no token: whoever reaches the address reads it"
        return f"diel dashboard: {label} at {_url(sock)}{login} (read-only{open_to}; " \
               "Ctrl-C stops it)"
    return (f"diel dashboard: {label} at unix socket {path} (read-only; Ctrl-C stops it); "
            f"from your machine: ssh -N -L {_FORWARDED_PORT}:{path} {socket.gethostname()}, "
            f"then open http://127.0.0.1:{_FORWARDED_PORT}/{login}")


def run_dashboard(args: argparse.Namespace) -> int:
    """``diel dashboard``: serve until interrupted; returns the exit code."""
    token, problem = _token(args)
    if problem:
        return usage_error("dashboard", problem)
    if args.socket is not None and (args.host is not None or args.port is not None):
        return usage_error("dashboard",
                           "--socket replaces --host and --port; give one or the other")
    missing = _missing_extra()
    if missing:
        return usage_error("dashboard", f"the dashboard needs {', '.join(missing)}, not "
                                        f"installed; install the dashboard extra: {INSTALL}")
    import diel.results

    try:
        results = diel.results.open(args.db)
    except ResultsError as e:
        return database_error("dashboard", e)
    path = os.path.abspath(args.socket) if args.socket is not None else None
    try:
        return _serve(results, _HOST if args.host is None else args.host,
                      _PORT if args.port is None else args.port, path, token)
    finally:
        results.close()


def _interrupted(signum: int, frame: object) -> None:
    """SIGTERM's handler: end as Ctrl-C does."""
    raise KeyboardInterrupt


def _serve(results: Results, host: str, port: int, path: str | None,
           token: str | None) -> int:
    """Bind (the Unix socket ``path``, else ``host``:``port``), announce the address on
    stdout, serve until Ctrl-C or SIGTERM; remove the socket's file at the end."""
    import signal
    import threading

    import uvicorn

    from diel.dashboard.app import create_app, prepare

    try:
        sock = _listen_unix(path) if path is not None else _listen(host, port)
    except FileExistsError as e:
        return usage_error("dashboard", f"cannot listen on --socket {e}")
    except (OSError, UnicodeError) as e:   # UnicodeError: a host name IDNA refuses
        where = f"--socket {path}" if path is not None else f"{host} port {port}"
        hint = "" if path is not None else "; choose another with --port/--host"
        return usage_error("dashboard", f"cannot listen on {where}: "
                                        f"{getattr(e, 'strerror', None) or e}{hint}")
    if token is None and path is None and not _loopback(sock):
        sock.close()
        return usage_error("dashboard", f"--no-token with --host {host} would serve the "
                                        "database to everyone who can reach this machine; "
                                        f"keep the token (the default) or listen on {_HOST}")
    try:
        app = create_app(results, token=token)
        threading.Thread(target=prepare, args=(app,), name="prepare", daemon=True).start()
        # the server is made (uvicorn configures logging there) before the address is
        # announced: a Ctrl-C that follows the announcement lands in server.run, never
        # inside logging's locks (where it ended the command with a traceback)
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False,
                                               lifespan="off"))
        # uvicorn shuts down cleanly on SIGINT or SIGTERM, then raises the signal again
        # with the handler it found: SIGTERM too ends here, not by the default action
        signal.signal(signal.SIGTERM, _interrupted)
        print(_announcement(results.label, sock, path, token), flush=True)
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        sock.close()
        if path is not None:
            Path(path).unlink(missing_ok=True)
    print("diel dashboard: stopped", file=sys.stderr)
    return 0
