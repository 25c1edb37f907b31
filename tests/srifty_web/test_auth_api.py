import pytest
from django.core.cache import cache

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_throttle():
    cache.clear()
    yield
    cache.clear()


def test_a_script_gets_its_token_with_username_and_password(api, user):
    resp = api.post("/api/v1/auth/token/", {"username": "alice", "password": "alice-pass-123"})
    assert resp.status_code == 200
    api.credentials(HTTP_AUTHORIZATION=f"Token {resp.json()['token']}")
    assert api.get("/api/v1/accelerators/").status_code == 200


def test_a_wrong_password_is_a_400_and_guessing_one_username_locks_it_out(api, user, settings):
    codes = [
        api.post("/api/v1/auth/token/", {"username": "alice", "password": f"guess-{i}"}).status_code
        for i in range(12)
    ]
    # the failure that reaches the limit already answers with the lockout (srifty_web.login_guard)
    assert codes[0] == 400 and codes[-1] == 429 and codes.count(400) == settings.LOGIN_FAILURES_PER_USER - 1


def test_requests_from_one_address_are_rate_limited_whatever_the_username(api, user):
    codes = [
        api.post("/api/v1/auth/token/", {"username": f"user{i}", "password": "guess"}).status_code
        for i in range(12)
    ]
    assert codes == [400] * 10 + [429] * 2  # TOKEN_THROTTLE_RATE: 10/min
