"""One cancel rule for profiling runs (``profiler.permissions``), asked by the API and the page."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Group, Permission
from django.core.exceptions import PermissionDenied
from rest_framework.test import APIClient

from profiler import permissions

MESSAGE = "only the owner (or profiler.change_profilingrun) may cancel this run"


@pytest.fixture
def mate(user, django_user_model):
    """A teammate of ``user`` (who owns the runs): sees them, holds no permission yet."""
    mate = django_user_model.objects.create_user("mate", password="m-pass-12345")
    Group.objects.create(name="team").user_set.add(mate, user)
    return mate


def _grant(user, django_user_model):
    user.user_permissions.add(Permission.objects.get(codename="change_profilingrun"))
    return django_user_model.objects.get(pk=user.pk)  # a fresh permission cache


@pytest.mark.django_db
def test_it_lets_the_owner_cancel_and_a_teammate_only_with_the_permission(
    user, mate, make_run, django_user_model
):
    run = make_run()
    assert permissions.can_cancel(user, run) and not permissions.can_cancel(mate, run)
    with pytest.raises(PermissionDenied, match=re.escape(MESSAGE)):
        permissions.check_cancel(mate, run)
    assert permissions.can_cancel(_grant(mate, django_user_model), run)


@pytest.mark.django_db
def test_the_api_and_the_page_refuse_a_teammate_with_the_same_message(
    client, mate, make_run, django_user_model
):
    run = make_run()
    api = APIClient()
    api.force_authenticate(mate)
    resp = api.post(f"/api/v1/profiling-runs/{run.pk}/cancel/")
    assert resp.status_code == 403 and resp.json()["detail"] == MESSAGE
    client.force_login(mate)
    page = client.get(f"/profiling/{run.pk}/").content.decode()
    assert f"/profiling/{run.pk}/cancel/" not in page  # no cancel button for a reader
    assert client.post(f"/profiling/{run.pk}/cancel/").status_code == 403
    run.refresh_from_db()
    assert not run.finished

    api.force_authenticate(_grant(mate, django_user_model))
    resp = api.post(f"/api/v1/profiling-runs/{run.pk}/cancel/")
    assert resp.status_code == 200 and resp.json()["status"] == "cancelled"
