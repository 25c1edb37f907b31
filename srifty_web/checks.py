"""System checks for insecure configuration (``manage.py check``, and before migrate/runserver).

Srifty runs fine on loopback with no configuration; once it answers other hosts, agents send
their one-run tokens and browsers their session cookies over the network, so the settings that
protect them must be on. These checks run without ``--deploy`` so that a real deployment that
forgot them is told at every start, not only when someone remembers to ask.

IDs: ``srifty.W001`` HTTPS off for public hosts, ``srifty.W002`` SITE_URL (where agents post
their token) not https, ``srifty.W003`` short SECRET_KEY, ``srifty.E001`` DEBUG on public hosts.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register

LOOPBACK_NAMES = {"localhost", "testserver", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}
MIN_SECRET_KEY_LENGTH = 50


def is_loopback_host(host: str) -> bool:
    """True for a host that only this machine reaches: localhost names, 127.0.0.0/8, ::1.

    Accepts ALLOWED_HOSTS forms (``.example.com``, ``*``, ``[::1]``) and ``host:port``.
    """
    host = (host or "").strip().lower()
    if not host or host == "*" or host.startswith("."):
        return host.endswith(".localhost") if host.startswith(".") else False
    if host.startswith("["):  # [::1] or [::1]:8000
        host = host[1 : host.find("]")] if "]" in host else host[1:]
    elif host.count(":") == 1:  # name:port
        host = host.split(":", 1)[0]
    host = host.rstrip(".")
    if host in LOOPBACK_NAMES or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def public_hosts(hosts) -> list[str]:
    return [h for h in (hosts or []) if not is_loopback_host(h)]


@register(Tags.security, deploy=False)
def check_security_settings(app_configs=None, **kwargs) -> list:
    messages: list = []
    public = public_hosts(getattr(settings, "ALLOWED_HOSTS", []))
    if settings.DEBUG:
        if public:
            messages.append(
                Error(
                    f"DEBUG is on while ALLOWED_HOSTS lets other machines in ({', '.join(public)}).",
                    hint="Tracebacks, settings and SQL are shown to anyone who reaches the server: "
                    "unset DEBUG, or keep ALLOWED_HOSTS to localhost/127.0.0.1 while developing.",
                    id="srifty.E001",
                )
            )
        return messages  # the remaining checks are about production settings

    if public and not getattr(settings, "SECURE_HTTPS", False):
        messages.append(
            Warning(
                f"SECURE_HTTPS is off while ALLOWED_HOSTS has non-loopback hosts ({', '.join(public)}).",
                hint="Serve Srifty behind HTTPS and set SECURE_HTTPS=1 (secure cookies, HSTS, redirect); "
                "otherwise session cookies and API tokens cross the network in clear text.",
                id="srifty.W001",
            )
        )

    site_url = getattr(settings, "SITE_URL", "") or ""
    parts = urlsplit(site_url)
    if site_url and parts.scheme != "https" and not is_loopback_host(parts.hostname or ""):
        messages.append(
            Warning(
                f"SITE_URL {site_url!r} is not https but points at another machine.",
                hint="Profiling agents post their one-run Bearer token to SITE_URL: use an https:// URL.",
                id="srifty.W002",
            )
        )

    key = getattr(settings, "SECRET_KEY", "") or ""
    if len(key) < MIN_SECRET_KEY_LENGTH:
        messages.append(
            Warning(
                f"SECRET_KEY has {len(key)} characters; use at least {MIN_SECRET_KEY_LENGTH}.",
                hint="Unset SECRET_KEY to have one generated in SRIFTY_DATA_DIR, or set a long random value "
                "(python -c 'import secrets; print(secrets.token_urlsafe(50))').",
                id="srifty.W003",
            )
        )
    return messages
