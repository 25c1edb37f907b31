"""Starting what costs money needs a permission: an EC2 profiling run rents a VM.

Before, any logged-in user (a read-only team member too) could start EC2 profiling VMs through
the API or the profiling form; a launch already needed ``launcher.add_job``."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission

from profiler.models import ProfilingRun
from tests.support.runs import EC2_RUN, LOCAL_RUN

pytestmark = pytest.mark.django_db


def test_an_ec2_run_without_the_permission_is_403_and_nothing_is_stored(user_api, catalog):
    resp = user_api.post("/api/v1/profiling-runs/", EC2_RUN, format="json")
    assert resp.status_code == 403 and "profiler.add_profilingrun" in resp.json()["detail"]
    assert not ProfilingRun.objects.exists()


def test_the_profiling_form_refuses_an_ec2_run_without_the_permission(client, user, catalog):
    client.force_login(user)
    assert client.post("/profiling/", EC2_RUN).status_code == 403
    assert not ProfilingRun.objects.exists()


def test_with_the_permission_an_ec2_run_is_accepted_and_local_runs_need_none(
    user, user_api, catalog, settings
):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    local = dict(LOCAL_RUN)
    assert user_api.post("/api/v1/profiling-runs/", local, format="json").status_code == 201
    user.user_permissions.add(Permission.objects.get(codename="add_profilingrun"))
    assert user_api.post("/api/v1/profiling-runs/", EC2_RUN, format="json").status_code == 201
