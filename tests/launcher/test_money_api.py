"""Money in the job API is a decimal string (srifty_web.money), and a job that never started
has spent nothing there as on its page."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from launcher import jobs
from launcher.models import JobStatus
from srifty_web.money import money
from tests.support.jobs import g5_spot_option, may_launch, running_job, solved_plan

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner(user, settings):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    return may_launch(user)


def job_json(owner, job_id: int) -> dict:
    api = APIClient()
    api.force_authenticate(owner)
    return api.get(f"/api/v1/jobs/{job_id}/").json()


def test_a_running_jobs_rate_cap_and_spend_are_decimal_strings(owner):
    plan = solved_plan(owner, g5_spot_option())  # 2 x $0.50/h
    job = running_job(owner, plan, ["i-0123456789abcdef0", "i-0123456789abcdef1"], {})
    job.rate_since = timezone.now() - timedelta(hours=2)
    job.save(update_fields=["rate_since"])
    shown = job_json(owner, job.pk)
    assert (shown["hourly_usd"], shown["max_spend_usd"]) == ("1.0000", "5.00")  # min($10, $1/h x 5 h)
    assert isinstance(shown["spend_usd"], str) and Decimal(shown["spend_usd"]) == pytest.approx(
        Decimal(2), abs=Decimal("0.01")
    )
    assert shown["resilience"]["cost_usd"] == "0.0000"


def test_a_job_that_never_started_shows_no_spend_in_the_api(owner):
    plan = solved_plan(owner, g5_spot_option())
    job = jobs.create_job(owner, plan, 1, "train.py", Decimal("10"), 5, confirm=True)
    job.status, job.finished_at = JobStatus.FAILED, timezone.now() + timedelta(hours=1)
    job.save(update_fields=["status", "finished_at"])
    assert job.spend_so_far() > 0  # counted from its creation, as the model does
    assert job_json(owner, job.pk)["spend_usd"] == "0.0000"


@pytest.mark.parametrize(
    ("value", "places", "text"),
    [
        (0.5, 4, "0.5000"),
        (Decimal("1.00005"), 4, "1.0000"),
        (1.00015, 4, "1.0002"),
        (7.134989757, 2, "7.13"),
        (None, 2, None),
    ],
)
def test_money_writes_a_decimal_string_rounded_half_even(value, places, text):
    assert money(value, places) == text
