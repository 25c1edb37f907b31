"""Issue 33, logins: password guessing ends in 429s on every login, API tokens are hashed and
expire, websockets check the origin's port, and ``testserver`` is no default host.

Probes (each failed on the code before the fix): 40 wrong passwords on ``/accounts/login/`` or
``/admin/login/`` were all answered as wrong passwords and the right one then logged in; 40
wrong passwords on the token endpoint with a fresh ``X-Forwarded-For`` each were all 400 (DRF's
throttle counted the header); tokens were stored in clear and never expired; a websocket from
``http://127.0.0.1:9999`` was accepted with a session cookie. Time is moved through
``login_guard.clock``, never slept.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.core.cache import cache
from django.db import connection
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

ROOT = Path(__file__).resolve().parents[2]
GUESSES = 40
LOCKED = "Too many failed sign-ins; try again in"


@pytest.fixture(autouse=True)
def _fresh_counts(settings):
    # A fast hasher: these tests check hundreds of passwords, each ~1 s with the real one here.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    cache.clear()  # failure counts, locks and DRF's throttle start empty
    yield
    cache.clear()


@pytest.fixture
def later(monkeypatch):
    """Moves the login guard's clock ``minutes`` ahead of now."""

    start = time.time()

    def move(minutes: float) -> None:
        from srifty_web import login_guard

        monkeypatch.setattr(login_guard, "clock", lambda: start + minutes * 60)

    return move


def _form_post(client: Client, url: str, username: str, password: str, next_url: str = "/", **extra):
    return client.post(url, {"username": username, "password": password, "next": next_url}, **extra)


# --- 1. the two login pages -----------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("url", "who", "landing"),
    [
        ("/accounts/login/", ("alice", "alice-pass-123"), "/"),
        ("/admin/login/", ("root", "root-pass-123"), "/admin/"),
    ],
)
def test_forty_wrong_passwords_on_a_login_page_end_in_429s_and_the_right_one_waits_out_the_lock(
    url, who, landing, user, staff, settings, later
):
    username, password = who
    client = Client()
    codes = [_form_post(client, url, username, f"guess-{i}").status_code for i in range(GUESSES)]
    assert codes[-10:] == [429] * 10, codes
    limit = settings.LOGIN_FAILURES_PER_USER
    assert codes[: limit - 1] == [200] * (limit - 1)  # the form again, "wrong password"
    assert codes[limit - 1 :] == [429] * (GUESSES - limit + 1), codes

    right = _form_post(client, url, username, password)
    assert right.status_code == 429 and "sessionid" not in right.cookies  # locked: no session
    assert LOCKED in right.content.decode() and "15 minutes" in right.content.decode()
    assert 14 * 60 < int(right["Retry-After"]) <= 15 * 60

    later(14)
    assert _form_post(client, url, username, password).status_code == 429
    later(16)
    after = _form_post(client, url, username, password, next_url=landing)
    assert after.status_code == 302 and after["Location"] == landing


@pytest.mark.django_db
def test_a_right_password_forgives_the_usernames_earlier_failures(user, settings):
    client = Client()
    for _ in range(2):
        for i in range(settings.LOGIN_FAILURES_PER_USER - 1):
            assert _form_post(client, "/accounts/login/", "alice", f"guess-{i}").status_code == 200
        assert _form_post(client, "/accounts/login/", "alice", "alice-pass-123").status_code == 302
        client.logout()


@pytest.mark.django_db
def test_an_address_that_guesses_many_usernames_is_locked_out_for_every_username(user, settings):
    client = Client()
    codes = [
        _form_post(client, "/accounts/login/", f"user{i}", "guess").status_code
        for i in range(settings.LOGIN_FAILURES_PER_ADDRESS)
    ]
    assert codes[-1] == 429 and codes.count(200) == settings.LOGIN_FAILURES_PER_ADDRESS - 1
    assert _form_post(client, "/accounts/login/", "alice", "alice-pass-123").status_code == 429
    # another address is not locked
    other = _form_post(Client(), "/accounts/login/", "alice", "alice-pass-123", REMOTE_ADDR="192.0.2.9")
    assert other.status_code == 302


# --- 2. the token endpoint --------------------------------------------------------------------


@pytest.mark.django_db
def test_forty_wrong_passwords_on_the_token_endpoint_with_rotating_x_forwarded_for_end_in_429s(user):
    api = APIClient()
    codes = []
    for i in range(GUESSES):
        resp = api.post(
            "/api/v1/auth/token/",
            {"username": "alice", "password": f"guess-{i}"},
            HTTP_X_FORWARDED_FOR=f"10.{i}.0.1",
        )
        codes.append(resp.status_code)
    assert codes.count(400) < 10 and codes[-10:] == [429] * 10, codes
    right = api.post(
        "/api/v1/auth/token/",
        {"username": "alice", "password": "alice-pass-123"},
        HTTP_X_FORWARDED_FOR="10.99.0.1",
    )
    assert right.status_code == 429 and "token" not in right.json()
    assert int(right["Retry-After"]) > 0


@pytest.mark.django_db
def test_rotating_usernames_and_x_forwarded_for_on_the_token_endpoint_still_end_in_429s(
    user, settings, monkeypatch
):
    from srifty_web.auth_api import PeerRateThrottle

    # DRF's per-minute throttle (read once, when DRF loads) would answer 429 first: lift it here.
    monkeypatch.setattr(PeerRateThrottle, "THROTTLE_RATES", {"token": "1000/min"})
    api = APIClient()
    codes = [
        api.post(
            "/api/v1/auth/token/",
            {"username": f"user{i}", "password": "guess"},
            HTTP_X_FORWARDED_FOR=f"10.{i}.0.1",
        ).status_code
        for i in range(GUESSES)
    ]
    limit = settings.LOGIN_FAILURES_PER_ADDRESS  # the lockout, not DRF's per-minute throttle
    assert codes[: limit - 1] == [400] * (limit - 1) and codes[limit - 1 :] == [429] * (GUESSES - limit + 1)
    locked = api.post("/api/v1/auth/token/", {"username": "alice", "password": "alice-pass-123"})
    assert locked.status_code == 429 and LOCKED in locked.json()["detail"]


@pytest.mark.django_db
def test_a_trusted_proxy_count_makes_the_proxys_x_forwarded_for_entry_the_client(user, settings):
    settings.TRUSTED_PROXY_COUNT = 1
    client = Client()
    # The client writes the left part; our one proxy appends the address it saw (203.0.113.7).
    for i in range(settings.LOGIN_FAILURES_PER_ADDRESS):
        _form_post(
            client, "/accounts/login/", f"user{i}", "guess", HTTP_X_FORWARDED_FOR=f"10.{i}.0.1, 203.0.113.7"
        )
    locked = _form_post(
        client, "/accounts/login/", "alice", "alice-pass-123", HTTP_X_FORWARDED_FOR="203.0.113.7"
    )
    assert locked.status_code == 429
    # Another client behind the same proxy, same peer address: its own count.
    other = _form_post(
        client, "/accounts/login/", "alice", "alice-pass-123", HTTP_X_FORWARDED_FOR="198.51.100.4"
    )
    assert other.status_code == 302


@pytest.mark.parametrize(("configured", "trusted"), [(None, 0), ("2", 2), ("-1", 0)])
def test_drf_throttles_trust_exactly_the_configured_proxies(configured, trusted, tmp_path):
    env = {} if configured is None else {"TRUSTED_PROXY_COUNT": configured}
    read = _settings_in_child(tmp_path, env, "[s.TRUSTED_PROXY_COUNT, s.REST_FRAMEWORK['NUM_PROXIES']]")
    assert read == [trusted, trusted]  # None would make DRF trust any X-Forwarded-For


# --- 3. API tokens: hashed at rest, with an expiry ------------------------------------------


@pytest.mark.django_db
def test_api_tokens_are_stored_only_as_their_sha256_and_expire_after_the_ttl(api, user, settings):
    from django.conf import settings as django_settings

    from accounts.models import ApiToken

    assert "rest_framework.authtoken" not in django_settings.INSTALLED_APPS
    resp = api.post("/api/v1/auth/token/", {"username": "alice", "password": "alice-pass-123"})
    assert resp.status_code == 200
    key = resp.json()["token"]
    row = ApiToken.objects.get(user=user)
    assert row.token_hash == hashlib.sha256(key.encode()).hexdigest()
    assert key not in json.dumps(list(ApiToken.objects.values()), default=str)
    ttl = row.token_expires_at - timezone.now()
    assert (
        timedelta(days=settings.API_TOKEN_TTL_DAYS - 1) < ttl <= timedelta(days=settings.API_TOKEN_TTL_DAYS)
    )

    api.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert api.get("/api/v1/accelerators/").status_code == 200
    ApiToken.objects.filter(pk=row.pk).update(token_expires_at=timezone.now() - timedelta(seconds=1))
    expired = api.get("/api/v1/accelerators/")
    assert expired.status_code == 401 and expired["WWW-Authenticate"] == "Token"


@pytest.mark.django_db
def test_an_unknown_token_and_no_token_get_401_with_www_authenticate(api, user):
    assert api.get("/api/v1/accelerators/").status_code == 401
    api.credentials(HTTP_AUTHORIZATION="Token " + "0" * 40)
    resp = api.get("/api/v1/accelerators/")
    assert resp.status_code == 401 and resp["WWW-Authenticate"] == "Token"


@pytest.mark.django_db
def test_each_call_issues_a_new_token_and_earlier_ones_keep_working(api, user):
    keys = [
        api.post("/api/v1/auth/token/", {"username": "alice", "password": "alice-pass-123"}).json()["token"]
        for _ in range(2)
    ]
    assert keys[0] != keys[1]
    for key in keys:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
        assert client.get("/api/v1/accelerators/").status_code == 200


@pytest.mark.django_db
def test_the_migration_hashes_clear_tokens_of_an_older_install_and_they_keep_working(user):
    from django.apps import apps

    from accounts.models import ApiToken

    migration = importlib.import_module("accounts.migrations.0002_hash_clear_tokens")
    key = "9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b"  # a DRF key: 40 hex digits
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY, created timestamp NOT NULL, "
            "user_id integer NOT NULL)"
        )
        cursor.execute(
            "INSERT INTO authtoken_token (key, created, user_id) VALUES (%s, %s, %s)",
            [key, timezone.now(), user.pk],
        )
    migration.hash_clear_tokens(apps, SimpleNamespace(connection=connection))
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM authtoken_token")
        assert cursor.fetchone()[0] == 0  # no clear key left
    assert ApiToken.objects.get(user=user).token_hash == hashlib.sha256(key.encode()).hexdigest()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get("/api/v1/accelerators/").status_code == 200


# --- 4. websocket origins ---------------------------------------------------------------------


def _session_cookie(user) -> bytes:
    c = Client()
    c.force_login(user)
    return f"sessionid={c.cookies['sessionid'].value}".encode()


@pytest.mark.django_db(transaction=True)
async def test_a_websocket_from_another_port_of_the_same_host_is_refused(make_run, user):
    from srifty_web.asgi import application

    run = await sync_to_async(make_run)()
    cookie = await sync_to_async(_session_cookie)(user)

    async def connect(origin: bytes) -> bool:
        headers = [(b"origin", origin), (b"host", b"127.0.0.1:8000"), (b"cookie", cookie)]
        comm = WebsocketCommunicator(application, f"/ws/profiling-runs/{run.pk}/", headers=headers)
        connected, _ = await comm.connect(timeout=10)
        await comm.disconnect()
        return connected

    assert await connect(b"http://127.0.0.1:8000")  # the page's own origin
    assert not await connect(b"http://127.0.0.1:9999")
    assert not await connect(b"http://evil.example:8000")


@pytest.mark.parametrize(
    ("origin", "host", "allowed"),
    [
        ("https://srifty.example", "srifty.example", True),
        ("https://srifty.example:443", "srifty.example", True),  # default ports are the same port
        ("http://srifty.example", "srifty.example:80", True),
        ("http://srifty.example:8080", "srifty.example", False),
        ("https://srifty.example:8443", "srifty.example:8443", True),
        ("https://srifty.example:9443", "srifty.example:8443", False),
        ("https://srifty.example", "other.example", False),  # Host not in ALLOWED_HOSTS
        ("https://other.example", "other.example", False),
        ("null", "srifty.example", False),
        ("https://srifty.example:99999", "srifty.example:99999", False),
        ("https://proxy.example", "10.0.0.5:8000", True),  # CSRF_TRUSTED_ORIGINS
        ("https://proxy.example:8443", "10.0.0.5:8000", False),
        ("http://127.0.0.1:8000", "", True),  # SITE_URL
    ],
)
def test_websocket_origins_match_on_scheme_host_and_port(origin, host, allowed, settings):
    from srifty_web.security import websocket_origin_allowed

    settings.ALLOWED_HOSTS = ["srifty.example"]
    settings.CSRF_TRUSTED_ORIGINS = ["https://proxy.example"]
    settings.SITE_URL = "http://127.0.0.1:8000"
    assert websocket_origin_allowed(origin, host) is allowed


# --- 5. default hosts -------------------------------------------------------------------------


def _settings_in_child(tmp_path: Path, env: dict[str, str], expression: str):
    """``expression`` over the settings module (``s``) as a fresh process reads it, with only
    ``env`` of the variables this test file is about set."""
    unset = ("ALLOWED_HOSTS", "DJANGO_SETTINGS_MODULE", "TRUSTED_PROXY_COUNT")
    child_env = {k: v for k, v in os.environ.items() if k not in unset}
    child_env.update(env, SRIFTY_DATA_DIR=str(tmp_path))
    out = subprocess.run(
        [sys.executable, "-c", f"import json, srifty_web.settings as s; print(json.dumps({expression}))"],
        cwd=ROOT,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_testserver_is_not_in_the_default_allowed_hosts(tmp_path):
    hosts = _settings_in_child(tmp_path, {}, "s.ALLOWED_HOSTS")
    assert "testserver" not in hosts and "127.0.0.1" in hosts
