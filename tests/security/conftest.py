"""Fixtures of the issue-33 upload probes (task files, JSON bodies, workdir archives)."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.support.jobs import g5_spot_option, may_launch, solved_plan


@pytest.fixture
def launcher_api(user) -> APIClient:
    """A user who may launch; a 500 comes back as an answer to assert on, not an exception."""
    client = APIClient(raise_request_exception=False)
    client.force_authenticate(may_launch(user))
    return client


@pytest.fixture
def plan(user):
    """A solved plan whose option 1 is one g5 spot node."""
    return solved_plan(user, g5_spot_option())
