"""Fixtures of the page tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _no_prechecks(settings):
    """Pages that launch or profile are not about the AWS pre-checks (``fleet.prechecks``) and
    fake no AWS: they are off unless a test turns them on (``test_job_pages``)."""
    settings.AWS_PRECHECKS = False
