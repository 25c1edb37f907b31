"""Fixtures of the launcher's tests that watch jobs on moto's EC2."""

from __future__ import annotations

import pytest

from cloud import ec2, session
from tests.support.jobs import may_launch

REGION = "us-east-1"


@pytest.fixture
def owner(user):
    """``user``, allowed to launch jobs."""
    return may_launch(user)


@pytest.fixture
def cloud(aws, settings, monkeypatch):
    """moto's EC2 in us-east-1 (its client), tasks run at once; moto has no placement groups, so
    creating and deleting one do nothing."""
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.immediate.ImmediateBackend"}}
    monkeypatch.setattr(ec2, "create_placement_group", lambda region, name: None)
    monkeypatch.setattr(ec2, "delete_placement_group", lambda region, name: None)
    return session.client("ec2", REGION)
