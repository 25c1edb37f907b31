"""Failed sign-ins, counted per username and per client address; a lockout after too many.

One guard for every place that checks a password: the login page, the admin's login page and the
token endpoint (``srifty_web.auth_api``). Each failure counts against the username (case-folded,
so ``Alice`` and ``alice`` share a count) and against the client's address. When either count
reaches its limit (``LOGIN_FAILURES_PER_USER`` / ``LOGIN_FAILURES_PER_ADDRESS`` within
``LOGIN_LOCKOUT_MINUTES``), that username or address is locked out for ``LOGIN_LOCKOUT_MINUTES``:
every sign-in for it is refused before the password is checked, the right password included (a
lockout that let the right password through would still answer the guess). A success clears
the username's count, not the address's: one good account must not launder an address's guesses.

The client address is the TCP peer (``REMOTE_ADDR``) unless ``TRUSTED_PROXY_COUNT`` says how
many proxies of ours append to ``X-Forwarded-For``: a header the client writes itself is never
believed, else rotating it would give each guess a fresh count.

State lives in Django's default cache: the process's memory with one web worker, Redis when
``REDIS_URL`` is set (several workers need it anyway, see ``srifty_web.serve``), so all workers
share the counts. Counters use the cache's atomic ``incr``; a lock holds its end time, compared
with :func:`clock` (tests move that clock instead of sleeping).
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest

PREFIX = "login-guard"


def clock() -> float:
    """Seconds since the epoch; the one clock locks are compared with."""
    return time.time()


@dataclass(frozen=True)
class Lockout:
    """A refused sign-in: how long until the lock ends (whole seconds, at least 1)."""

    retry_after_s: int

    @property
    def minutes(self) -> int:
        return max(1, math.ceil(self.retry_after_s / 60))

    @property
    def message(self) -> str:
        unit = "minute" if self.minutes == 1 else "minutes"
        return f"Too many failed sign-ins; try again in {self.minutes} {unit}."


def client_address(request: HttpRequest) -> str:
    """The address a sign-in comes from: the peer, or the one our trusted proxies saw.

    With ``TRUSTED_PROXY_COUNT = n`` each of our n proxies appends the address it received from
    to ``X-Forwarded-For``, so the n-th entry from the right is the client's as the outermost
    proxy saw it; the entries left of it are whatever the client sent (the same rule as DRF's
    ``NUM_PROXIES``, which settings set from the same number)."""
    trusted = settings.TRUSTED_PROXY_COUNT
    if trusted > 0:
        hops = [hop.strip() for hop in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
        hops = [hop for hop in hops if hop]
        if hops:
            return hops[-min(trusted, len(hops))]
    return str(request.META.get("REMOTE_ADDR") or "unknown")


def _window_s() -> int:
    return int(settings.LOGIN_LOCKOUT_MINUTES * 60)


def _subjects(username: str, address: str) -> list[tuple[str, int]]:
    """(cache key stem, failure limit) for the username and the address. Hashed: a key stays
    short and plain whatever a client typed."""
    user = hashlib.sha256(username.strip().casefold().encode()).hexdigest()
    addr = hashlib.sha256(address.encode()).hexdigest()
    return [
        (f"{PREFIX}:user:{user}", settings.LOGIN_FAILURES_PER_USER),
        (f"{PREFIX}:addr:{addr}", settings.LOGIN_FAILURES_PER_ADDRESS),
    ]


def lockout(username: str, address: str) -> Lockout | None:
    """The lockout in force for this username or address, the longer one if both are."""
    now = clock()
    ends = cache.get_many([f"{stem}:locked" for stem, _ in _subjects(username, address)]).values()
    remaining = max((end - now for end in ends if end > now), default=0.0)
    return Lockout(max(1, math.ceil(remaining))) if remaining > 0 else None


def _count(key: str) -> int:
    """One more failure under ``key``, atomically; the count lives one window from its first."""
    cache.add(key, 0, timeout=_window_s())
    try:
        return cache.incr(key)
    except ValueError:  # the window ended between add and incr: this failure starts the next
        cache.add(key, 1, timeout=_window_s())
        return 1


def record_failure(username: str, address: str) -> Lockout | None:
    """Counts a wrong password; the lockout it starts (or one already in force), if any.

    A subject that reaches its limit is locked for one window and its count starts again, so
    after the lock it gets the same number of tries, then the same lock."""
    for stem, limit in _subjects(username, address):
        if _count(f"{stem}:failures") >= limit:
            cache.set(f"{stem}:locked", clock() + _window_s(), timeout=_window_s())
            cache.delete(f"{stem}:failures")
    return lockout(username, address)


def record_success(username: str) -> None:
    """A right password outside any lockout: the username's failures are forgiven."""
    stem, _ = _subjects(username, "")[0]
    cache.delete(f"{stem}:failures")
