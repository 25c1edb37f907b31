"""A running plan whose worker stopped answering says so on its page (issue 36 item 4, issue 38
item 6): the notice of planner.app.solving.stale_notice, not only "running"."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from planner.app.models import PlanRecord, PlanStatus

pytestmark = pytest.mark.django_db

MODEL = {"spec": "torchvision:resnet18", "input_shape": "3,32,32"}


def _running(owner, *, beat_age_s: float) -> PlanRecord:
    """A plan a worker took once, whose last heartbeat is ``beat_age_s`` old."""
    beat = timezone.now() - timedelta(seconds=beat_age_s)
    return PlanRecord.objects.create(
        owner=owner,
        request={"model": MODEL, "objective": "cost"},
        status=PlanStatus.RUNNING,
        attempts=1,
        started_at=beat,
        heartbeat_at=beat,
        phase="search",
    )


def test_a_stale_plans_page_shows_that_its_worker_stopped_answering_and_what_will_happen(
    client, user, settings
):
    settings.PLAN_LEASE_S = 60
    client.force_login(user)
    page = client.get(f"/plans/{_running(user, beat_age_s=90).pk}/").content.decode()
    note = page.split('id="plan-stale-note"', 1)[1].split("</p>", 1)[0]
    assert " hidden" not in note.split(">", 1)[0]
    age = re.search(r"stopped answering (\d+) s ago \(lease 60 s\); it will be queued again", note)
    assert age is not None and 90 <= int(age.group(1)) < 120  # seconds pass while the page renders
    assert '<strong id="plan-status">running (stalled)</strong>' in page


def test_a_plan_whose_worker_answers_shows_running_and_a_hidden_notice(client, user, settings):
    settings.PLAN_LEASE_S = 60
    client.force_login(user)
    page = client.get(f"/plans/{_running(user, beat_age_s=5).pk}/").content.decode()
    assert 'id="plan-stale-note" hidden' in page and "stopped answering" not in page
    assert '<strong id="plan-status">running</strong>' in page
