"""Content-Security-Policy for every response, and a CSV cell guard for any future export.

The pages load only same-origin scripts (one small file each, plus plotly.js served from the
plotly package) and carry their data in ``json_script`` blocks, so scripts need nothing beyond
``'self'``. Styles allow ``'unsafe-inline'``: plotly.js sets ``style`` attributes on the SVG it
draws, and a few templates do too; an injected style cannot run script. ``connect-src 'self'``
covers the pages' own API polls and their websockets (CSP 3 matches ws/wss of the same host).

Two pages get one more script source (``EXTRA_SCRIPT_SOURCES``): the plan and job pages draw
WebGL scatters whose plotly.js engine compiles code at run time (``'unsafe-eval'``; inline
scripts and handlers stay blocked there). Swagger UI needs none: ``SpectacularSwaggerSplitView``
serves its initialiser from a URL.

Websockets get their own origin check (:class:`SameOriginWebsocketValidator`): a browser sends
the session cookie to any port of the host, so a page on another port of the same machine
(``http://127.0.0.1:9999``) must not open ours; scheme, host and port must all match.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.http.request import split_domain_port, validate_host

POLICY = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self' 'unsafe-inline'",
    "img-src": "'self' data: blob:",
    "font-src": "'self' data:",
    "connect-src": "'self'",
    "worker-src": "'self' blob:",
    "object-src": "'none'",
    "base-uri": "'none'",
    "form-action": "'self'",
    "frame-ancestors": "'none'",
}
# Pages that need more than 'self' for scripts, by view name (see the module docstring).
EXTRA_SCRIPT_SOURCES = {
    # plotly.js draws these pages' large scatters with WebGL (scattergl): its regl engine compiles
    # draw calls with Function(), which CSP counts as eval. Inline scripts stay blocked there.
    "plan-page": "'unsafe-eval'",
    "job-page": "'unsafe-eval'",
}


def _header(policy: dict[str, str]) -> str:
    return "; ".join(f"{k} {v}" for k, v in policy.items())


STRICT = _header(POLICY)
RELAXED = {
    name: _header({**POLICY, "script-src": f"'self' {extra}"}) for name, extra in EXTRA_SCRIPT_SOURCES.items()
}


class ContentSecurityPolicyMiddleware:
    """Adds ``Content-Security-Policy`` to every response that does not set its own."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if "Content-Security-Policy" not in response:
            match = getattr(request, "resolver_match", None)
            name = match.view_name if match is not None else ""
            response["Content-Security-Policy"] = RELAXED.get(name, STRICT)
        return response


FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def csv_safe_cell(value):
    """A CSV cell a spreadsheet will not run as a formula (OWASP "CSV injection").

    Text starting with ``= + - @``, a tab or a carriage return gets a leading ``'``; numbers
    (``int``/``float``/``Decimal``, negative ones included) and ``None`` pass unchanged, so they
    stay numbers. Every CSV export must write its cells through this.
    """
    if value is None or isinstance(value, (bool, int, float, Decimal)):
        return value
    text = str(value)
    return "'" + text if text.startswith(FORMULA_PREFIXES) else text


DEFAULT_PORTS = {"http": 80, "https": 443}
Origin = tuple[str, str, int]  # scheme, host (lower case, no brackets), port


def parse_origin(url: str) -> Origin | None:
    """``(scheme, host, port)`` of an http(s) origin or URL, the scheme's default port filled in;
    ``None`` for anything else (``null``, another scheme, a malformed port)."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    return parts.scheme, parts.hostname.lower(), port or DEFAULT_PORTS[parts.scheme]


def _allowed_hosts() -> list[str]:
    # Django's own fallback for an empty ALLOWED_HOSTS under DEBUG (HttpRequest.get_host).
    if settings.DEBUG and not settings.ALLOWED_HOSTS:
        return [".localhost", "127.0.0.1", "[::1]"]
    return list(settings.ALLOWED_HOSTS)


def websocket_origin_allowed(origin_header: str, host_header: str) -> bool:
    """Whether a websocket opened from page ``origin_header`` may reach us.

    Allowed: our public address (``SITE_URL``), ``CSRF_TRUSTED_ORIGINS``, and the origin of the
    address the browser connected to (its ``Host``, a host in ``ALLOWED_HOSTS``), each compared
    on scheme, host and port. A ``Host`` without a port stands for the default port of the
    page's scheme (what a browser sends for ``https://host/``, also behind a TLS proxy)."""
    origin = parse_origin(origin_header)
    if origin is None:
        return False
    configured = {parse_origin(url) for url in [settings.SITE_URL, *settings.CSRF_TRUSTED_ORIGINS]}
    if origin in configured:
        return True
    domain, _ = split_domain_port(host_header)
    if not domain or not validate_host(domain, _allowed_hosts()):
        return False
    return parse_origin(f"{origin[0]}://{host_header}") == origin


class SameOriginWebsocketValidator:
    """ASGI wrapper: a websocket whose ``Origin`` is not allowed (see
    :func:`websocket_origin_allowed`) is closed before the handshake completes."""

    def __init__(self, application):
        self.application = application

    async def __call__(self, scope, receive, send):
        headers = {name: value.decode("latin1") for name, value in scope.get("headers", [])}
        if scope["type"] == "websocket" and not websocket_origin_allowed(
            headers.get(b"origin", ""), headers.get(b"host", "")
        ):
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)
