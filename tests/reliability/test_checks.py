"""srifty.* system checks: insecure settings are reported once Srifty answers other hosts."""

import pytest
from django.core.checks import ERROR, WARNING, run_checks
from django.test import override_settings

from srifty_web.checks import is_loopback_host

LONG_KEY = "k" * 64
LOCAL = ["localhost", "127.0.0.1", "[::1]", "testserver"]


def _ours(**overrides) -> dict[str, int]:
    """{check id: level} of the srifty.* messages under these settings."""
    settings = {
        "DEBUG": False,
        "SECRET_KEY": LONG_KEY,
        "ALLOWED_HOSTS": LOCAL,
        "SITE_URL": "http://127.0.0.1:8000",
        "SECURE_HTTPS": False,
        **overrides,
    }
    with override_settings(**settings):
        return {
            m.id: m.level
            for m in run_checks(include_deployment_checks=False)
            if m.id is not None and m.id.startswith("srifty.")
        }


def test_the_default_loopback_install_is_clean():
    assert _ours() == {}


def test_the_checks_are_registered_for_manage_py_check():
    from django.core.checks.registry import registry

    assert any(
        c.__module__ == "srifty_web.checks" for c in registry.get_checks(include_deployment_checks=False)
    )


def test_public_hosts_without_https_warn():
    assert _ours(ALLOWED_HOSTS=[*LOCAL, "srifty.example.com"]) == {"srifty.W001": WARNING}
    assert _ours(ALLOWED_HOSTS=["*"]) == {"srifty.W001": WARNING}
    assert _ours(ALLOWED_HOSTS=[".example.com"]) == {"srifty.W001": WARNING}
    assert _ours(ALLOWED_HOSTS=["10.0.0.5"]) == {"srifty.W001": WARNING}


def test_public_hosts_behind_https_are_fine():
    assert (
        _ours(ALLOWED_HOSTS=["srifty.example.com"], SECURE_HTTPS=True, SITE_URL="https://srifty.example.com")
        == {}
    )


def test_a_plain_http_site_url_for_agents_warns():
    assert _ours(SITE_URL="http://srifty.example.com") == {"srifty.W002": WARNING}
    assert _ours(SITE_URL="http://10.0.0.5:8000/") == {"srifty.W002": WARNING}
    assert _ours(SITE_URL="https://srifty.example.com") == {}
    assert _ours(SITE_URL="http://localhost:8000") == {}
    assert _ours(SITE_URL="http://[::1]:8000") == {}


def test_a_short_secret_key_warns():
    assert _ours(SECRET_KEY="x" * 49) == {"srifty.W003": WARNING}
    assert _ours(SECRET_KEY="x" * 50) == {}


def test_everything_wrong_at_once_reports_each_problem():
    found = _ours(
        ALLOWED_HOSTS=["srifty.example.com"], SITE_URL="http://srifty.example.com", SECRET_KEY="dev"
    )
    assert found == {"srifty.W001": WARNING, "srifty.W002": WARNING, "srifty.W003": WARNING}


def test_debug_with_public_hosts_is_an_error():
    assert _ours(DEBUG=True, ALLOWED_HOSTS=["srifty.example.com"]) == {"srifty.E001": ERROR}


def test_debug_on_loopback_is_fine_even_with_dev_settings():
    assert _ours(DEBUG=True, SECRET_KEY="dev", SITE_URL="http://example.com") == {}


@pytest.mark.parametrize(
    "host, local",
    [
        ("localhost", True),
        ("LOCALHOST", True),
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("[::1]", True),
        ("::1", True),
        ("testserver", True),
        ("127.0.0.1:8000", True),
        ("[::1]:8000", True),
        ("app.localhost", True),
        (".localhost", True),
        ("localhost.", True),
        ("*", False),
        ("", False),
        ("srifty.example.com", False),
        (".example.com", False),
        ("10.1.2.3", False),
        ("0.0.0.0", False),
        ("[2001:db8::1]", False),
        ("localhost.example.com", False),
        ("127.0.0.1.nip.io", False),
    ],
)
def test_loopback_hosts(host, local):
    assert is_loopback_host(host) is local
