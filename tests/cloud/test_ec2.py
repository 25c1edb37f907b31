"""cloud.ec2 calls moto does not implement, against botocore's Stubber (the rest of cloud.ec2 is
tested against moto in tests/profiler/test_ec2.py)."""

from __future__ import annotations

import pytest
from botocore.stub import Stubber
from django.conf import settings

from cloud import ec2, session

REGION = "us-east-1"


@pytest.fixture
def stubbed(aws, monkeypatch):
    cli = session.client("ec2", REGION)
    monkeypatch.setattr(session, "client", lambda service, region: cli)
    with Stubber(cli) as stub:
        yield stub
        stub.assert_no_pending_responses()


def test_managed_placement_groups_lists_only_this_installs_groups_by_name(stubbed):
    expected = {
        "Filters": [
            {"Name": "tag:srifty:managed", "Values": ["true"]},
            {"Name": "tag:srifty:install-id", "Values": [settings.INSTALL_ID]},
        ]
    }
    answer = {"PlacementGroups": [{"GroupName": "srifty-job-9"}, {"GroupName": "srifty-job-12"}]}
    stubbed.add_response("describe_placement_groups", answer, expected)
    assert ec2.managed_placement_groups(REGION) == ["srifty-job-12", "srifty-job-9"]
