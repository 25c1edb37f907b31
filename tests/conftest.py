"""Shared fixtures: users and clients, the imported catalog, a real moto server on 127.0.0.1."""

from __future__ import annotations

import functools
import json
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

PROFILE_FIXTURES = Path(__file__).parent / "profiler" / "fixtures"


@pytest.fixture(autouse=True)
def _no_prechecks(settings):
    """Tests that launch jobs or start EC2 profiling runs are not about the AWS pre-checks
    (``fleet.prechecks``), and most fake no STS or Service Quotas: the checks are off unless a
    test turns them on (``test_prechecks``, ``test_ec2_prechecks``, ``test_job_pages``). The
    browser suite's server runs with them on (its default)."""
    settings.AWS_PRECHECKS = False


@pytest.fixture
def no_aws_credentials(settings, monkeypatch, tmp_path):
    """boto3's whole credential chain comes up empty, as on a fresh clone: no environment keys, no
    profile files, no instance role, no container or web-identity credentials; the AWS pre-checks
    on (they are what such tests look at)."""
    import boto3

    for key in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_ROLE_ARN",
    ):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    # boto3's default session keeps the credentials an earlier test's client resolved
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    settings.AWS_ENDPOINT_URL = "http://127.0.0.1:9"  # never reached: signing fails first
    settings.AWS_PRECHECKS = True


@pytest.fixture(autouse=True)
def _private_data_dir(settings, tmp_path):
    """Run files (agent output, logs) of each test go to its own folder, never to var/."""
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()


@pytest.fixture(autouse=True)
def _close_async_db_connections():
    """Close the database connection of asgiref's one thread-sensitive thread after each test.

    Async tests (consumers, ``database_sync_to_async``) run their ORM calls there, outside any
    request, so nothing closes that connection (CONN_MAX_AGE keeps it); on PostgreSQL it would
    still be open when the test database is dropped ("being accessed by other users")."""
    yield
    from asgiref.sync import SyncToAsync
    from django.db import connections

    SyncToAsync.single_thread_executor.submit(connections.close_all).result(timeout=30)


async def _live_next(comm, timeout: float = 5):
    """The next live message on a WebsocketCommunicator, whether it came alone or in a
    coalesced array (srifty_web/live.py)."""
    buffered = comm.__dict__.setdefault("_srifty_live", [])
    if not buffered:
        data = await comm.receive_json_from(timeout=timeout)
        buffered.extend(data if isinstance(data, list) else [data])
    return buffered.pop(0)


@pytest.fixture
def live_next():
    return _live_next


@functools.cache
def _password_hash(password: str, hashers: tuple[str, ...]) -> str:
    """``make_password(password)`` once per test process and ``PASSWORD_HASHERS`` (a test may
    set a fast one): the real hasher (PBKDF2, ~0.5 s a hash on CI's cores) ran again for every
    test that made the same fixture user, ~900 of them."""
    from django.contrib.auth.hashers import make_password

    return make_password(password)


def _with_password(user, password: str):
    """``user`` (made without a usable password) with ``password`` set as ``set_password`` would
    store it: the same hasher and format, the hash computed once per process."""
    from django.conf import settings

    user.password = _password_hash(password, tuple(settings.PASSWORD_HASHERS))
    user.save(update_fields=["password"])
    return user


@pytest.fixture
def user(django_user_model):
    made = django_user_model.objects.create_user(username="alice", password=None)
    return _with_password(made, "alice-pass-123")


@pytest.fixture
def staff(django_user_model):
    made = django_user_model.objects.create_superuser(username="root", password=None)
    return _with_password(made, "root-pass-123")


@pytest.fixture
def api() -> APIClient:
    return APIClient()


@pytest.fixture
def user_api(user) -> APIClient:
    client = APIClient()
    from accounts.tokens import issue_api_token

    client.credentials(HTTP_AUTHORIZATION=f"Token {issue_api_token(user).key}")
    return client


@pytest.fixture
def catalog(db):
    """The bundled snapshot, imported into the test database: really once per process, then the
    same rows copied in (``tests/support/catalog_copy.py``, ~0.4 s less for each of ~400 tests)."""
    from tests.support.catalog_copy import load_snapshot

    return load_snapshot()


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
    """Point every AWS client of the app (``cloud.session``) at the moto server, with throwaway
    credentials. The one moto server of the session is ``moto_server``; the browser tests'
    server processes get its URL too."""
    import requests

    requests.post(f"{moto_server}/moto-api/reset", timeout=10)  # every test starts from a clean AWS
    settings.AWS_ENDPOINT_URL = moto_server
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return moto_server


@pytest.fixture
def aws_hooks(aws, monkeypatch) -> list[tuple[str, object]]:
    """(event, handler) pairs that are registered on every boto3 client ``cloud`` makes from now
    on (``cloud.session.client``): botocore ``before-send`` / ``before-call`` hooks answer for
    what moto lacks or inject faults, ``before-parameter-build`` ones record requests."""
    from cloud import session

    registered: list[tuple[str, object]] = []
    real = session.client

    def client(service: str, region: str):
        made = real(service, region)
        for event, handler in registered:
            made.meta.events.register(event, handler)
        return made

    monkeypatch.setattr(session, "client", client)
    return registered


@pytest.fixture
def compute_profile() -> dict:
    return json.loads((PROFILE_FIXTURES / "tiny_compute.json").read_text())


@pytest.fixture
def comm_profile() -> dict:
    return json.loads((PROFILE_FIXTURES / "tiny_comm.json").read_text())


@pytest.fixture
def make_run(db, user):
    def make(owner=None, **fields):
        from profiler.models import ProfilingRun

        defaults = {
            "kind": "compute",
            "model_spec": "examples.tiny_model:build",
            "input_shape": "3,32,32",
            "batch_sizes": "4,8",
            "iters": 3,
            "deadline_at": timezone.now() + timedelta(minutes=10),
        }
        defaults.update(fields)
        return ProfilingRun.objects.create(owner=owner or user, **defaults)

    return make


@pytest.fixture
def agent_run(make_run):
    """A run with a live agent token: (run, token)."""
    from profiler.actions import issue_token

    run = make_run()
    return run, issue_token(run)
