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


def test_a_wrong_password_is_a_400_and_guessing_is_rate_limited(api, user):
    codes = [
        api.post("/api/v1/auth/token/", {"username": "alice", "password": f"guess-{i}"}).status_code
        for i in range(12)
    ]
    assert codes[0] == 400 and codes[-1] == 429 and codes.count(400) == 10
