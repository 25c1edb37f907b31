"""Shared fixtures: users and clients, the imported catalog, a real moto server on 127.0.0.1."""

from __future__ import annotations

import os

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient


@pytest.fixture(autouse=True)
def _private_data_dir(settings, tmp_path):
    """Run files (agent output, logs) of each test go to its own folder, never to var/."""
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()


@pytest.fixture
def user(django_user_model):
    return django_user_model.objects.create_user(username="alice", password="alice-pass-123")


@pytest.fixture
def staff(django_user_model):
    return django_user_model.objects.create_superuser(username="root", password="root-pass-123")


@pytest.fixture
def api() -> APIClient:
    return APIClient()


@pytest.fixture
def user_api(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


@pytest.fixture
def catalog(db):
    """The bundled snapshot, imported into the test database."""
    from catalog.importer import import_snapshot

    return import_snapshot()


@pytest.fixture(scope="session")
def moto_server():
    """moto's real HTTP server on a free port of 127.0.0.1, for the whole test session."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server._server.server_address
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def aws(moto_server, settings, monkeypatch):
    """Point every boto3 client of the app at the moto server, with throwaway credentials."""
    import requests

    requests.post(f"{moto_server}/moto-api/reset", timeout=10)  # every test starts from a clean AWS
    settings.AWS_ENDPOINT_URL = moto_server
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": "us-east-1",
    }.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return moto_server


