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
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

from django.http import HttpRequest, HttpResponse

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
