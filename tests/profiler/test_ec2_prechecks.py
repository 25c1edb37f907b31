"""An EC2 profiling run is pre-checked like a job launch (issue 38 item 2): AWS's refusal is a
400 with every check and its fix, and no run row is created (before, the run was created and
failed at once with a raw message and a Cancel button)."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from accounts.tokens import issue_api_token
from profiler import actions
from profiler.models import ProfilingRun
from tests.support.runs import EC2_RUN, LOCAL_RUN

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_api(staff) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {issue_api_token(staff).key}")
    return client


def test_an_ec2_run_without_credentials_is_a_400_with_the_checks_and_no_run_is_created(
    staff_api, catalog, no_aws_credentials
):
    resp = staff_api.post("/api/v1/profiling-runs/", EC2_RUN, format="json")
    assert resp.status_code == 400
    body = resp.json()
    [check] = body["checks"]
    assert (check["name"], check["status"]) == ("credentials", "error")
    assert "Unable to locate credentials" in check["message"] and "AWS_ACCESS_KEY_ID" in check["fix"]
    assert body["detail"].startswith("1 pre-check(s) failed, nothing was started")
    assert not ProfilingRun.objects.exists()


def test_a_local_run_asks_aws_nothing(user_api, no_aws_credentials, settings):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    local = dict(LOCAL_RUN)
    assert user_api.post("/api/v1/profiling-runs/", local, format="json").status_code == 201


def test_an_ec2_run_aws_accepts_is_created_after_its_checks(staff_api, catalog, aws, settings):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    settings.AWS_PRECHECKS = True
    resp = staff_api.post("/api/v1/profiling-runs/", EC2_RUN, format="json")
    assert resp.status_code == 201, resp.json()
    assert ProfilingRun.objects.get().instance_type == "g5.xlarge"


def test_a_cluster_run_is_one_node_group_with_an_address_per_efa_interface(catalog):
    group = actions.ec2_launch_group(
        {"instance_type": "p4d.24xlarge", "region": "us-east-1", "nodes": 2, "market": "spot"}
    )
    assert (group.instance_type, group.count, group.region, group.zone, group.market) == (
        "p4d.24xlarge",
        2,
        "us-east-1",
        None,
        "spot",
    )
    assert group.addresses_per_node == 4
    one = actions.ec2_launch_group({"instance_type": "p4d.24xlarge", "region": "us-east-1", "nodes": None})
    assert (one.count, one.market, one.addresses_per_node) == (1, "on-demand", 1)
