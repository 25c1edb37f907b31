"""Schemathesis against the live OpenAPI schema (``/api/schema/``) of the WSGI application.

Every operation is called by a user with a DRF token (and, for the agent-event endpoint, by an
agent with its run's Bearer token) with bodies, query strings and path parameters generated from
the schema. Checks: no 5xx (``not_a_server_error``) for every operation; for GET operations, also
``response_schema_conformance`` (the body matches what the schema documents) and
``content_type_conformance``. Data the user can see is seeded (a small catalog, finished runs with
samples and a profile), and each GET detail operation is also called on a real object, so the
schema of a non-empty answer gets checked, not only 404s.

Bounded: the coverage phase is off and each operation gets a few fuzzed examples, so the module
stays well under a minute. Nothing leaves the machine: tasks use the dummy backend and boto3 points
at a closed port on 127.0.0.1; on_commit callbacks do not run in these tests at all.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
import schemathesis
from django.conf import settings as django_settings
from django.core.cache import cache
from django.core.wsgi import get_wsgi_application
from hypothesis import HealthCheck, event, settings
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance

FIXTURES = Path(__file__).parent.parent / "profiler" / "fixtures"
CONFIG = SchemathesisConfig.from_dict(
    {
        "phases": {"coverage": {"enabled": False}, "stateful": {"enabled": False}},
        "generation": {"max-examples": 12},
        **({"seed": 20261202} if os.environ.get("CI") else {}),  # CI replays the same cases
    }
)
FUZZ = settings(
    max_examples=12,
    deadline=None,
    database=None,
    derandomize=bool(os.environ.get("CI")),
    suppress_health_check=list(HealthCheck),
)
GET_CHECKS = [not_a_server_error, response_schema_conformance, content_type_conformance]

schema = schemathesis.openapi.from_wsgi("/api/schema/", get_wsgi_application(), config=CONFIG)


@pytest.fixture(autouse=True)
def _keep_the_test_connection():
    """The WSGI handler closes "old" connections at each request start and end; inside a test's
    transaction that would close it (PostgreSQL: "the connection is closed"). Django's own test
    client disconnects the same handlers."""
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture(autouse=True)
def _offline(settings):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    settings.AWS_ENDPOINT_URL = "http://127.0.0.1:9"  # nothing listens there: no AWS call can succeed
    cache.clear()


@pytest.fixture
def seeded(db, user):
    """A small catalog and the user's runs: finished compute and comm runs with samples and a
    profile, a running run with events, a failed one. Returns {name: object}."""
    from datetime import timedelta

    from django.utils import timezone

    from catalog import importer
    from catalog.models import Accelerator, InstanceType
    from profiler import actions
    from profiler.models import ProfilingRun, RunStatus

    fixtures = Path(django_settings.CATALOG_FIXTURES_DIR)
    rows = (fixtures / "aws_gpu_instances.csv").read_text().splitlines()
    picked = [rows[0]]
    for name in ("p4d.24xlarge,", "g5.xlarge,", "g4dn.xlarge,"):
        picked += [r for r in rows if r.startswith(name)][:3]
    importer.import_catalog(
        io.StringIO("\n".join(picked) + "\n"),
        network=fixtures / "aws_instance_network.csv",
        gpu_specs=fixtures / "gpu_specs.csv",
    )
    deadline = timezone.now() + timedelta(minutes=10)
    common = {"owner": user, "deadline_at": deadline, "status": RunStatus.RUNNING}
    compute = ProfilingRun.objects.create(
        kind="compute",
        model_spec="examples.tiny_model:build",
        input_shape="3,16,16",
        batch_sizes="2,4",
        iters=3,
        **common,
    )
    actions.complete_run(compute, json.loads((FIXTURES / "tiny_compute.json").read_text()))
    comm = ProfilingRun.objects.create(kind="comm", world_size=2, backend="gloo", sizes="1KB..4KB", **common)
    actions.complete_run(comm, json.loads((FIXTURES / "tiny_comm.json").read_text()))
    live = ProfilingRun.objects.create(
        kind="compute", model_spec="torchvision:resnet18", input_shape="3,224,224", **common
    )
    actions.record_event(
        live, {"seq": 1, "type": "progress", "phase": "compute", "fraction": 0.25, "time_ms": 3.5}
    )
    failed = ProfilingRun.objects.create(
        kind="compute",
        model_spec="torchvision:resnet18",
        input_shape="3,224,224",
        provider="ec2",
        instance_type="g5.xlarge",
        region="us-east-1",
        market="spot",
        **common,
    )
    actions.fail_run(failed, "could not start the agent: boom")
    return {
        "compute": compute,
        "comm": comm,
        "live": live,
        "failed": failed,
        "accelerator": Accelerator.objects.order_by("name").first(),
        "instance_type": InstanceType.objects.get(name="p4d.24xlarge"),
    }


def _headers(user) -> dict:
    from accounts.tokens import issue_api_token

    return {"Authorization": f"Token {issue_api_token(user).key}"}


PRICES = "/api/v1/prices/"


def _get_checks(case) -> list:
    return GET_CHECKS  # S1 (prices documented as a bare array) is fixed: every GET is checked alike


@pytest.mark.django_db
@schema.include(method="GET").parametrize()
@FUZZ
def test_get_operations_answer_by_their_schema(case, seeded, user):
    response = case.call_and_validate(headers=_headers(user), checks=_get_checks(case))
    event(f"HTTP {response.status_code}")


DETAILS = {
    "/api/v1/accelerators/{name}/": lambda s: {"name": s["accelerator"].name},
    "/api/v1/instance-types/{name}/": lambda s: {"name": s["instance_type"].name},
    "/api/v1/profiling-runs/{id}/": lambda s: {"id": s["compute"].pk},
    "/api/v1/profiling-runs/{id}/profile/": lambda s: {"id": s["compute"].pk},
}


@pytest.mark.django_db
@pytest.mark.parametrize("path", sorted(DETAILS))
@pytest.mark.parametrize("which", ["compute", "comm", "live", "failed"])
def test_real_objects_answer_by_their_schema(path, which, seeded, user):
    params = DETAILS[path](seeded)
    if "id" in params:
        params["id"] = seeded[which].pk
    elif which != "compute":
        pytest.skip("one catalog object is enough")
    case = schema[path]["GET"].Case(path_parameters=params)
    response = case.call_and_validate(headers=_headers(user), checks=GET_CHECKS)
    expected = 404 if path.endswith("/profile/") and which in ("live", "failed") else 200
    assert response.status_code == expected, response.text[:500]


@pytest.mark.django_db
@pytest.mark.parametrize("query", [{}, {"limit": 2}, {"limit": 2, "offset": 1}])
def test_lists_answer_by_their_schema(query, seeded, user):
    for path in ("/api/v1/accelerators/", "/api/v1/instance-types/", "/api/v1/profiling-runs/"):
        response = (
            schema[path]["GET"].Case(query=query).call_and_validate(headers=_headers(user), checks=GET_CHECKS)
        )
        assert response.status_code == 200 and response.json()["count"] > 0


@pytest.mark.django_db
@schema.exclude(method="GET").parametrize()
@FUZZ
def test_no_operation_answers_5xx(case, seeded, user):
    response = case.call_and_validate(headers=_headers(user), checks=[not_a_server_error])
    event(f"HTTP {response.status_code}")


@pytest.mark.django_db
@schema.include(path="/api/v1/profiling-runs/{id}/events/", method="POST").parametrize()
@FUZZ
def test_the_agent_event_endpoint_with_a_real_agent_token(case, seeded):
    from profiler import actions
    from profiler.models import ProfilingRun, RunStatus

    run = seeded["live"]
    # An earlier example may have ended the run (an error or result event): live again, since a
    # finished run gets no token.
    ProfilingRun.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING, finished_at=None)
    case.path_parameters = {**(case.path_parameters or {}), "id": run.pk}
    token = actions.issue_token(run)
    cache.clear()
    response = case.call_and_validate(
        headers={"Authorization": f"Bearer {token}"}, checks=[not_a_server_error]
    )
    event(f"HTTP {response.status_code}")


@pytest.mark.django_db
def test_bug_s1_the_price_list_answers_by_its_schema(seeded, user):
    schema[PRICES]["GET"].Case().call_and_validate(headers=_headers(user), checks=GET_CHECKS)
