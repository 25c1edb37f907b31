"""A job's ``option`` (its copy of the plan row) says money as decimal strings in the API, and
the websocket's status message says the spend as one, as the API's ``spend_usd`` does."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from launcher import jobs
from tests.support.jobs import g5_spot_option, may_launch, running_job, solved_plan

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(user, settings):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    owner = may_launch(user)
    plan = solved_plan(owner, g5_spot_option(total_usd=1.0, cost_p90_usd=1.2))  # 2 x $0.50/h
    return running_job(owner, plan, ["i-0123456789abcdef0", "i-0123456789abcdef1"], {})


def test_the_jobs_option_says_its_money_as_decimal_strings_and_the_job_keeps_numbers(job):
    api = APIClient()
    api.force_authenticate(job.owner)
    option = api.get(f"/api/v1/jobs/{job.pk}/").json()["option"]
    assert (option["hourly_usd"], option["total_usd"], option["cost_p90_usd"]) == (
        "1.0000",
        "1.0000",
        "1.2000",
    )
    assert [g["price_per_hour"] for g in option["groups"]] == ["0.5000"]
    assert option["iter_time_s"] == 0.5 and option["groups"][0]["count"] == 2  # not money: numbers
    job.refresh_from_db()
    assert job.option["hourly_usd"] == 1.0  # the stored row (the launcher's reads) keeps numbers


def test_the_websocket_status_says_the_spend_as_a_decimal_string(job):
    job.rate_since = timezone.now() - timedelta(hours=2)
    job.save(update_fields=["rate_since"])
    spend = jobs.status_message(job)["spend_usd"]
    assert isinstance(spend, str) and Decimal(spend).as_tuple().exponent == -4
    assert Decimal(spend) == pytest.approx(Decimal(2), abs=Decimal("0.01"))  # 2 h x $1/h
