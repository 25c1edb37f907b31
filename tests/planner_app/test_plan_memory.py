"""The memory limit per plan (``PLAN_MAX_MEMORY_MB``): a request whose up-front search state
cannot fit is a 400 (API) or a command error naming the field and the limit, before anything is
stored; one whose search outgrows the limit later fails the plan with the error and its field,
never a dead worker."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from planner.app import service
from planner.app.models import PlanRecord
from planner.app.tasks import solve_plan_task
from tests.support.plans import plan_body, plan_command

pytestmark = pytest.mark.django_db

BODY = plan_body(max_nodes=64, max_types=3)
CLI = plan_command(max_nodes=64, max_types=3)


def _room_for_the_upfront_state_only() -> float:
    """A limit that the up-front state fits (so the request is accepted) with 1 MB to spare:
    the first block of 3-type subsets the search bounds does not fit."""
    from planner.app.serializers import offers_per_region
    from planner.solver import preflight

    inp = service.PlanInput.from_request({**BODY, "total_samples": 1e6})
    offers = sum(offers_per_region(BODY))
    budget = preflight(inp.request, service._instance_types(inp), offers, 1e9)
    return budget.fixed / (1 << 20) + 1.0


def test_the_default_limit_is_a_setting(settings):
    assert 0 < settings.PLAN_MAX_MEMORY_MB <= 1000
    settings.PLAN_MAX_MEMORY_MB = 77
    assert service.memory_limit_mb() == 77


def test_a_request_whose_search_state_cannot_fit_is_a_400_naming_the_field_and_the_limit(
    user_api, catalog, settings
):
    settings.PLAN_MAX_MEMORY_MB = 0.01
    resp = user_api.post("/api/v1/plans/", BODY, format="json")
    assert resp.status_code == 400, resp.content
    [message] = resp.json()["max_nodes"]
    assert "0.01 MB limit per plan" in message and "lower max_nodes (now 64)" in message
    assert not PlanRecord.objects.exists()


def test_a_search_that_outgrows_the_limit_fails_the_plan_naming_the_field(user_api, catalog, settings):
    settings.PLAN_MAX_MEMORY_MB = _room_for_the_upfront_state_only()
    resp = user_api.post("/api/v1/plans/", BODY, format="json")
    assert resp.status_code == 202, resp.content
    assert solve_plan_task.call(resp.json()["id"]) == f"plan {resp.json()['id']} failed"
    done = user_api.get(resp["Location"]).json()
    assert done["status"] == "failed" and done["error_field"] == "max_types"
    assert "MB limit per plan" in done["error"] and "lower max_types (now 3)" in done["error"]
    assert "the solver failed" not in done["error"]  # an answer about the request, not a crash


def test_the_command_refuses_with_the_field_and_the_limit_up_front(catalog, staff, settings):
    settings.PLAN_MAX_MEMORY_MB = 0.01
    with pytest.raises(CommandError) as exc:
        call_command(*CLI)
    assert str(exc.value).startswith("max_nodes: ") and "MB limit per plan" in str(exc.value)
    assert not PlanRecord.objects.exists()


def test_the_command_reports_a_search_that_outgrows_the_limit(catalog, staff, settings):
    settings.PLAN_MAX_MEMORY_MB = _room_for_the_upfront_state_only()
    with pytest.raises(CommandError) as exc:
        call_command(*CLI)
    assert "failed: max_types: " in str(exc.value) and "MB limit per plan" in str(exc.value)
    assert PlanRecord.objects.get().error_field == "max_types"


def test_within_the_limit_the_same_request_solves(user_api, catalog, settings):
    settings.PLAN_MAX_MEMORY_MB = 256
    resp = user_api.post("/api/v1/plans/", BODY, format="json")
    solve_plan_task.call(resp.json()["id"])
    done = user_api.get(resp["Location"]).json()
    assert done["status"] == "solved", done["error"]
    assert 0 < done["result"]["stats"]["search_memory_mb"] <= 256
