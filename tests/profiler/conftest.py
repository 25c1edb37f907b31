"""Fixtures of the profiler's tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _no_prechecks(settings):
    """EC2 runs here are not about the AWS pre-checks (``fleet.prechecks``), and most fake no STS
    or Service Quotas: they are off unless a test turns them on (``test_ec2_prechecks``)."""
    settings.AWS_PRECHECKS = False
