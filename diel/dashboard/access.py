"""Who may read the dashboard: whoever holds its token.

A login node's 127.0.0.1 is reachable by every user logged in there, and the page serves
everything the database holds, so ``diel dashboard`` makes a random token by default (as
Jupyter does) and prints it in the address it announces. :class:`TokenGate` wraps the
whole application, every endpoint and static file, and lets a request through when:

- its ``?token=`` is the token: the answer is a redirect (303) to the same address
  without the token (so it leaves the address bar, the history and any later Referer)
  that sets an ``HttpOnly``, ``SameSite=Strict`` cookie holding it;
- it carries that cookie (the page's own requests, after the first visit);
- or an ``Authorization: Bearer TOKEN`` header (a script reading the JSON endpoints).

Anything else answers 401 with one sentence and no data: not the study names, not the
database's path. Tokens are compared with :func:`hmac.compare_digest` (constant time).
The cookie's name carries the port the browser used (``diel_dashboard_8050``), so two
dashboards on one machine do not overwrite each other's. Which token, and whether there
is one, :mod:`diel.dashboard.cli` decides.
"""

from __future__ import annotations

import hmac
from typing import Any, Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response

__all__ = ["TokenGate"]

_REFUSED = ("this diel dashboard needs its token: open the address 'diel dashboard' "
            "printed (http://HOST:PORT/?token=...)")
_NO_STORE = {"Cache-Control": "no-store"}

Scope = dict[str, Any]
ASGIApp = Callable[[Scope, Any, Any], Awaitable[None]]


def _same(given: str | None, token: bytes) -> bool:
    """Whether ``given`` is the token, in time that does not depend on where they differ."""
    return given is not None and hmac.compare_digest(given.encode("utf-8", "replace"), token)


class TokenGate:
    """ASGI middleware: the wrapped application only for requests that show the token
    (module docstring); every other HTTP request answers 401."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._token = token.encode("utf-8")

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":   # lifespan: nothing to read
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        given = request.query_params.get("token")
        if given is None and self._holds(request):
            await self.app(scope, receive, send)
            return
        if given is not None and _same(given, self._token):
            response = self._login(request)
        else:
            response = _refused(request)
        await response(scope, receive, send)

    def _holds(self, request: Request) -> bool:
        """Whether the request carries the token in its cookie or its Authorization."""
        scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and _same(credentials.strip(), self._token):
            return True
        return _same(request.cookies.get(_cookie(request)), self._token)

    def _login(self, request: Request) -> Response:
        """A redirect to the address without its token, setting the cookie."""
        url = request.url.remove_query_params("token")
        target = "/" + url.path.lstrip("/") + (f"?{url.query}" if url.query else "")
        response = RedirectResponse(target, status_code=303, headers=_NO_STORE)
        response.set_cookie(_cookie(request), self._token.decode(), httponly=True,
                            samesite="strict", path="/")
        return response


def _cookie(request: Request) -> str:
    """The cookie's name: one a port, as the browser addressed the dashboard."""
    port = request.url.port
    return f"diel_dashboard_{port}" if port else "diel_dashboard"


def _refused(request: Request) -> Response:
    """401 with one sentence: JSON for the endpoints (the page shows its error), text
    for the page and its files."""
    headers = {**_NO_STORE, "WWW-Authenticate": 'Bearer realm="diel dashboard"'}
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": _REFUSED}, status_code=401, headers=headers)
    return PlainTextResponse(_REFUSED + "\n", status_code=401, headers=headers)
