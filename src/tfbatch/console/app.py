"""The console's HTTP side: Starlette routes over a ConsoleSource, with an optional token login.

``console_app(source)`` is a whole app (tests, a stand-alone console); ``mount_console(app,
source, token)`` adds the same routes to another Starlette app (``tfbatch api``'s). Only GET
routes (and the login form's POST) under ``base``, plus ``GET /`` redirecting there, so the
API's own ``POST /`` and ``/endpoints/<name>/invocations`` are untouched.

Auth: with a token, every console route needs a session cookie (set by the login form, or
by opening ``<base>/login?token=...`` once) or ``Authorization: Bearer <token>``. The token
is the console's own, never the AWS secret: a browser should not hold the key that signs
API calls. The cookie holds an HMAC of the token, not the token.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
from typing import Any, Callable
from urllib.parse import parse_qs, quote

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from tfbatch.console import pages
from tfbatch.console.assets import CSS, JS
from tfbatch.console.source import JOB_STATUSES, ConsoleSource

COOKIE = "tfbatch_console"
MAX_PAGE = 500
MAX_LOGIN_BODY = 4096
SECURITY_HEADERS = {
    # No inline script anywhere: the console's one script is served from its own route.
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                               "img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class BadQuery(ValueError):
    pass


def _int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadQuery(f"{name} must be a whole number from {low} to {high}, got {raw[:40]!r}") from None
    if not low <= value <= high:
        raise BadQuery(f"{name} must be a whole number from {low} to {high}, got {value}")
    return value


def _status_param(request: Request) -> str | None:
    status = request.query_params.get("status") or None
    if status is not None and status not in JOB_STATUSES:
        raise BadQuery(f"status must be one of {', '.join(JOB_STATUSES)}, got {status[:40]!r}")
    return status


class ConsoleAuth:
    """Checks a request for the console token; ``token=None`` lets everything through."""

    def __init__(self, token: str | None):
        if token is not None and len(token) < 16:
            raise ValueError("the console token must be at least 16 characters")
        self.token = token
        self.session = hmac.new(token.encode(), b"tfbatch-console-session", hashlib.sha256).hexdigest() if token else ""

    def allows(self, request: Request) -> bool:
        if self.token is None:
            return True
        cookie = request.cookies.get(COOKIE, "")
        if cookie and hmac.compare_digest(cookie.encode(), self.session.encode()):
            return True
        header = request.headers.get("authorization", "")
        return header.startswith("Bearer ") and self.token_ok(header[7:])

    def token_ok(self, given: str) -> bool:
        return self.token is not None and hmac.compare_digest(given.encode(), self.token.encode())


SourceFor = Callable[[Request], ConsoleSource]
TokenFor = Callable[[Request], "str | None"]


def console_routes(source: ConsoleSource | SourceFor, *, token: str | None | TokenFor = None,
                   base: str = "/console", root_redirect: bool = True) -> list[Route]:
    """The console's routes over ``source``.

    ``source`` and ``token`` may also be functions of the request, for an app whose routes
    exist before the state they read (``tfbatch api`` registers routes at import and opens
    its store at start-up: the functions find it through ``request.app.state``).
    """
    base = base.rstrip("/")
    fixed_source = source if isinstance(source, ConsoleSource) else None
    fixed_auth = None if callable(token) else ConsoleAuth(token)
    auths: dict[str | None, ConsoleAuth] = {}

    def auth_for(request: Request) -> ConsoleAuth:
        if fixed_auth is not None:
            return fixed_auth
        value = token(request)  # type: ignore[operator]
        if value not in auths:
            auths[value] = ConsoleAuth(value)
        return auths[value]

    def source_for(request: Request) -> ConsoleSource:
        return fixed_source if fixed_source is not None else source(request)  # type: ignore[operator]

    def html(body: str, status: int = 200) -> HTMLResponse:
        return HTMLResponse(body, status, headers=SECURITY_HEADERS)

    def guarded(handler: Callable[[Request], Response], *, is_json: bool = False) -> Callable[[Request], Response]:
        def endpoint(request: Request) -> Response:
            if not auth_for(request).allows(request):
                if is_json or request.url.path.startswith(f"{base}/fragments/") or request.url.path.endswith("/live"):
                    return JSONResponse({"error": "console login required"}, 401, headers=SECURITY_HEADERS)
                return RedirectResponse(f"{base}/login?next={quote(request.url.path)}", 303)
            try:
                return handler(request)
            except BadQuery as exc:
                if is_json:
                    return JSONResponse({"error": str(exc)}, 400, headers=SECURITY_HEADERS)
                return html(pages.message_page("Bad request", str(exc), base=base), 400)
        return endpoint  # Starlette runs a plain function in its thread pool: sources may block

    def not_found(what: str, is_json: bool = False) -> Response:
        if is_json:
            return JSONResponse({"error": f"no such {what}"}, 404, headers=SECURITY_HEADERS)
        return html(pages.message_page("Not found", f"No such {what}.", base=base), 404)

    def job_page_parts(request: Request, name: str):
        src = source_for(request)
        detail = src.job(name)
        if detail is None:
            return None
        return detail, src.progress(name), src.failures(name), src.log_tail(name)

    def jobs(request: Request) -> Response:
        status = _status_param(request)
        page = source_for(request).list_jobs(status=status, offset=_int_param(request, "offset", 0, 0, 10**9),
                                limit=_int_param(request, "limit", 50, 1, MAX_PAGE))
        if request.url.path.startswith(f"{base}/fragments/"):
            return html(pages.jobs_table(page, base=base, status=status))
        return html(pages.jobs_page(page, base=base, status=status))

    def job(request: Request) -> Response:
        parts = job_page_parts(request, request.path_params["name"])
        if parts is None:
            return not_found(f"job {request.path_params['name']!r}")
        if request.url.path.endswith("/live"):
            return html(pages.job_live(*parts))
        return html(pages.job_page(*parts, base=base))

    def endpoints(request: Request) -> Response:
        rows = source_for(request).endpoints()
        if request.url.path.startswith(f"{base}/fragments/"):
            return html(pages.endpoints_table(rows))
        return html(pages.endpoints_page(rows, base=base))

    def models(request: Request) -> Response:
        return html(pages.models_page(source_for(request).models(), base=base))

    def api_jobs(request: Request) -> Response:
        page = source_for(request).list_jobs(status=_status_param(request), offset=_int_param(request, "offset", 0, 0, 10**9),
                                limit=_int_param(request, "limit", 50, 1, MAX_PAGE))
        return JSONResponse(_plain(page), headers=SECURITY_HEADERS)

    def api_job(request: Request) -> Response:
        name = request.path_params["name"]
        src = source_for(request)
        detail = src.job(name)
        if detail is None:
            return not_found(f"job {name!r}", True)
        return JSONResponse({"job": _plain(detail), "failures": _plain(src.failures(name)),
                             "log": src.log_tail(name)}, headers=SECURITY_HEADERS)

    def api_progress(request: Request) -> Response:
        name = request.path_params["name"]
        src = source_for(request)
        if src.job(name) is None:
            return not_found(f"job {name!r}", True)
        series = src.progress(name)
        return JSONResponse({str(i): [[p.t, p.objects, p.records, p.failed] for p in points]
                             for i, points in series.items()}, headers=SECURITY_HEADERS)

    def api_endpoints(request: Request) -> Response:
        return JSONResponse([_plain(e) for e in source_for(request).endpoints()], headers=SECURITY_HEADERS)

    def api_models(request: Request) -> Response:
        return JSONResponse([_plain(m) for m in source_for(request).models()], headers=SECURITY_HEADERS)

    def asset(body: str, media: str) -> Callable[[Request], Response]:
        def serve(request: Request) -> Response:
            return Response(body, media_type=media, headers={"X-Content-Type-Options": "nosniff",
                                                             "Cache-Control": "max-age=300"})
        return serve

    def login_form(request: Request, problem: str = "", status: int = 200) -> Response:
        nxt = _safe_next(request.query_params.get("next", ""), base)
        auth = auth_for(request)
        given = request.query_params.get("token")
        if given is not None and auth.token_ok(given):
            return _logged_in(auth, nxt)
        body = ((f'<p class="error">{pages.esc(problem)}</p>' if problem else "")
                + f'<form method="post" action="{pages.esc(base)}/login?next={pages.esc(quote(nxt))}">'
                "<label>Console token <input type=\"password\" name=\"token\" autocomplete=\"current-password\">"
                "</label> <button type=\"submit\">Sign in</button></form>"
                '<p class="muted">The token <code>tfbatch api</code> printed when it started (not an AWS key).</p>')
        return html(pages.layout("Sign in", body, base=base), status)

    async def login(request: Request) -> Response:
        auth = auth_for(request)
        if request.method == "GET" or auth.token is None:
            return login_form(request) if auth.token is not None else RedirectResponse(f"{base}/jobs", 303)
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_LOGIN_BODY:
                return login_form(request, "The sign-in form was too large.", 413)
        given = parse_qs(body.decode("utf-8", "replace")).get("token", [""])[0]
        if not auth.token_ok(given):
            return login_form(request, "That token is not the console token.", 401)
        return _logged_in(auth, _safe_next(request.query_params.get("next", ""), base))

    def _logged_in(auth: ConsoleAuth, nxt: str) -> Response:
        response = RedirectResponse(nxt, 303)
        response.set_cookie(COOKIE, auth.session, httponly=True, samesite="strict", path=base or "/")
        return response

    def to_jobs(request: Request) -> Response:
        return RedirectResponse(f"{base}/jobs", 303)

    routes = [
        Route(f"{base}/static/console.css", asset(CSS, "text/css"), methods=["GET"]),
        Route(f"{base}/static/console.js", asset(JS, "text/javascript"), methods=["GET"]),
        Route(f"{base}/login", login, methods=["GET", "POST"]),
        Route(f"{base}/jobs", guarded(jobs), methods=["GET"]),
        Route(f"{base}/fragments/jobs", guarded(jobs), methods=["GET"]),
        Route(f"{base}/jobs/{{name:path}}/live", guarded(job), methods=["GET"]),
        Route(f"{base}/jobs/{{name:path}}", guarded(job), methods=["GET"]),
        Route(f"{base}/endpoints", guarded(endpoints), methods=["GET"]),
        Route(f"{base}/fragments/endpoints", guarded(endpoints), methods=["GET"]),
        Route(f"{base}/models", guarded(models), methods=["GET"]),
        Route(f"{base}/api/jobs", guarded(api_jobs, is_json=True), methods=["GET"]),
        Route(f"{base}/api/jobs/{{name:path}}/progress", guarded(api_progress, is_json=True), methods=["GET"]),
        Route(f"{base}/api/jobs/{{name:path}}", guarded(api_job, is_json=True), methods=["GET"]),
        Route(f"{base}/api/endpoints", guarded(api_endpoints, is_json=True), methods=["GET"]),
        Route(f"{base}/api/models", guarded(api_models, is_json=True), methods=["GET"]),
        Route(base or "/", to_jobs, methods=["GET"]),
    ]
    if root_redirect and base:
        routes.append(Route("/", to_jobs, methods=["GET"]))
    return routes


def _safe_next(nxt: str, base: str) -> str:
    """Where to go after signing in: only a path inside the console (no open redirect)."""
    if nxt.startswith(f"{base}/") and not nxt.startswith("//") and "\\" not in nxt:
        return nxt
    return f"{base}/jobs"


def _plain(value: Any) -> Any:
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value


def console_app(source: ConsoleSource | SourceFor, *, token: str | None = None, base: str = "/console") -> Starlette:
    """A stand-alone app serving the console over ``source``."""
    return Starlette(routes=console_routes(source, token=token, base=base))


def mount_console(app: Starlette, source: ConsoleSource | SourceFor, *, token: str | None | TokenFor = None,
                  base: str = "/console") -> None:
    """Add the console's routes to ``app``, after its own (so the app's routes win any overlap)."""
    app.router.routes.extend(console_routes(source, token=token, base=base))
