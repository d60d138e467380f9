"""The dashboard's web application (Starlette): one page and the JSON it reads.

``GET /`` is the page (``static/index.html``, plain JavaScript); ``/static/...`` its
script, its style sheet and Plotly's JavaScript, served from the installed ``plotly``
package (no network needed). The JSON endpoints, every one a read:

=========================================  ============================================
``/api/info``                              the database's label, the poll period
``/api/versions``                          one short string a study, changing with it
``/api/studies``                           every study: counts, best, its run (lease)
``/api/study?study=S``                     one study: settings, worker copies, kinds
``/api/trials?study=S&sort=&status=&``     one page of its trials, sorted and filtered
``where=&offset=&limit=``                  in the database, and how many match
``/api/trial?study=S&number=N``            one trial with its per-epoch reports, its
                                           segments and its parameters' distributions
``/api/plot?study=S&kind=K``               one plot as Plotly figure JSON (``lineage``:
                                           population-based training's family tree)
=========================================  ============================================

A malformed or unknown argument answers 400 with ``{"error": ...}`` naming it (a
number out of range, negative, huge, fractional or not a number; a NUL character, which
PostgreSQL cannot take; a filter or sort the reader refuses), never a 500; a database
that fails answers 503. Handlers are plain functions, which Starlette runs in its
thread pool, so a slow plot never holds up the table.

With a token (:mod:`diel.dashboard.access`) every route, the page and its files
included, answers only requests that show it; without one, whoever reaches the address
reads everything the database holds.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from importlib import resources
from typing import Any, Callable
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from diel import __version__
from diel.dashboard.access import TokenGate
from diel.dashboard.plots import Plots, kinds_of
from diel.dashboard.reader import PAGE_SIZES, Reader, json_safe
from diel.plot._kinds import KIND_HELP
from diel.errors import ResultsError
from diel.results import Results, whole_number

__all__ = ["create_app", "prepare", "POLL_MS"]

POLL_MS = 2000
_STATIC_TYPES = {"dashboard.js": "text/javascript", "dashboard.css": "text/css"}
_LONG_CACHE = {"Cache-Control": "public, max-age=31536000, immutable"}
_NO_STORE = {"Cache-Control": "no-store"}


class _Problem(ValueError):
    """A request argument that is missing or malformed (400)."""


def _static(name: str) -> str:
    return resources.files("diel.dashboard").joinpath("static", name).read_text("utf-8")


@functools.lru_cache(maxsize=1)
def _plotly_js() -> tuple[bytes, str]:
    """Plotly's JavaScript from the installed ``plotly`` package, and its version; read
    once a process (3.5 MB, ~20 ms to read and encode), however many apps it makes."""
    import plotly
    from plotly.offline import get_plotlyjs

    return get_plotlyjs().encode("utf-8"), plotly.__version__


def _arg(request: Request, name: str) -> str:
    value = request.query_params.get(name)
    if value is None or value == "":
        raise _Problem(f"missing query parameter {name!r}")
    return value


def _int(request: Request, name: str, default: int | None = None) -> int:
    """Query parameter ``name`` as a whole number from 0 to the largest the database
    stores (``default`` when absent)."""
    text = request.query_params.get(name)
    if text is None and default is not None:
        return default
    text = _arg(request, name)
    try:
        return whole_number(text)
    except ValueError as e:
        raise _Problem(f"query parameter {name}: {e}") from None


def _check_text(request: Request) -> None:
    """A :class:`_Problem` for a query parameter holding a NUL character (no database
    text holds one; PostgreSQL refuses it as a parameter)."""
    for name, value in request.query_params.multi_items():
        if "\x00" in value:
            raise _Problem(f"query parameter {name} holds a NUL character")


def _json(handler: Callable[[Request], Any]) -> Callable[[Request], Response]:
    """``handler``'s answer as JSON (text answers pass as they are), its errors as
    400 / 503 with ``{"error": ...}``; a ``Server-Timing`` header says the CPU time it
    took (the page paces its refreshes by it)."""
    def endpoint(request: Request) -> Response:
        started = time.thread_time()
        try:
            _check_text(request)
            answer = handler(request)
            response = Response(answer, media_type="application/json") \
                if isinstance(answer, str) else JSONResponse(json_safe(answer))
        except ValueError as e:   # _Problem too: a malformed request or unknown key
            response = JSONResponse({"error": str(e)}, status_code=400)
        except ResultsError as e:
            response = JSONResponse({"error": str(e).splitlines()[0]}, status_code=503)
        response.headers.update(_NO_STORE)
        response.headers["Server-Timing"] = f"app;dur={(time.thread_time() - started) * 1e3:.1f}"
        return response
    return endpoint


def create_app(results: Results, *, token: str | None) -> Starlette:
    """The dashboard over the open, read-only ``results`` (which the caller closes),
    answering only requests that show ``token`` (None: every request)."""
    reader = Reader(results)
    plots = Plots(results)
    plotly_js, plotly_version = _plotly_js()
    info = {"database": reader.label, "poll_ms": POLL_MS, "diel": __version__,
            "page_sizes": list(PAGE_SIZES),
            "plotly": f"static/plotly.min.js?v={quote(plotly_version)}"}
    assets = {name: _static(name) for name in _STATIC_TYPES}
    page = (_static("index.html").replace("{{info}}", json.dumps(info).replace("<", "\\u003c"))
            .replace("{{plotly}}", info["plotly"]))
    for name, text in assets.items():   # cached for good: the address changes with the file
        page = page.replace(f"{{{{{name}}}}}", hashlib.sha256(text.encode()).hexdigest()[:12])

    def index(request: Request) -> Response:
        return HTMLResponse(page, headers=_NO_STORE)

    def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name == "plotly.min.js":
            return Response(plotly_js, media_type="text/javascript", headers=_LONG_CACHE)
        if name not in assets:
            return Response("not found", status_code=404, media_type="text/plain")
        return Response(assets[name], media_type=_STATIC_TYPES[name], headers=_LONG_CACHE)

    def study(request: Request) -> dict[str, Any]:
        found = reader.study(_arg(request, "study"))
        return {**found, "kinds": kinds_of(len(found["objectives"]), found["lineage"])}

    def trials(request: Request) -> dict[str, Any]:
        return reader.trial_page(
            _arg(request, "study"), sort=request.query_params.get("sort") or None,
            status=request.query_params.get("status") or None,
            where=request.query_params.getlist("where"), offset=_int(request, "offset", 0),
            limit=_int(request, "limit", 50))

    def trial(request: Request) -> dict[str, Any]:
        return reader.trial(_arg(request, "study"), _int(request, "number"))

    def plot(request: Request) -> str:
        name, kind = _arg(request, "study"), _arg(request, "kind")
        if kind not in KIND_HELP:
            raise _Problem(f"unknown plot kind {kind!r}; the kinds are {', '.join(KIND_HELP)}")
        versions = reader.versions()
        if name not in versions:
            raise _Problem(f"no study {name!r} in {reader.label}; its studies: "
                           f"{', '.join(sorted(versions)) or 'none yet'}")
        return plots.figure(name, kind, versions[name])

    routes = [
        Route("/", index),
        Route("/static/{name}", static),
        Route("/api/info", _json(lambda request: info)),
        Route("/api/versions", _json(lambda request: {"versions": reader.versions()})),
        Route("/api/studies", _json(lambda request: {"studies": reader.studies()})),
        Route("/api/study", _json(study)),
        Route("/api/trials", _json(trials)),
        Route("/api/trial", _json(trial)),
        Route("/api/plot", _json(plot)),
    ]
    gate = [Middleware(TokenGate, token=token)] if token is not None else []
    app = Starlette(routes=routes, middleware=gate)
    app.state.reader, app.state.plots = reader, plots
    return app


def prepare(app: Starlette) -> None:
    """Compute the plot a first visit asks for (the history plot of the study the page
    opens on: one a live run holds, else the last updated), so that the page shows it
    at once. Meant for a background thread at start; a failure is left for the request
    itself to report."""
    reader: Reader = app.state.reader
    try:
        studies = reader.studies()
        if not studies:
            return
        live = [s for s in studies if s["run"] and s["run"]["live"]]
        first = live[0] if live else max(studies, key=lambda s: s["updated_at"] or "")
        app.state.plots.figure(first["name"], "history", reader.versions()[first["name"]])
    except (ResultsError, ValueError, KeyError):
        return
