import json
import re

import pytest

from planner.app.models import PlanRecord

pytestmark = pytest.mark.django_db

FORM = {"model_source": "spec", "spec": "torchvision:squeezenet1_1", "input_shape": "3,32,32", "precision": "amp",
        "samples_per_epoch": "100000", "epochs": "5", "objective": "cost", "deadline_hours": "12",
        "regions": ["us-east-1"], "spot": "on", "on_demand": "on", "max_nodes": "4", "max_types": "1",
        "global_batch_min": "256", "global_batch_max": "512", "checkpoint_interval_h": "0.5",
        "restart_overhead_h": "0.1", "baseline_gpu": "A100"}


def test_solving_from_the_form_shows_the_chart_table_and_launch_links(client, staff, catalog):
    client.force_login(staff)
    resp = client.post("/plans/", FORM)
    plan = PlanRecord.objects.get()
    assert resp.status_code == 302 and resp["Location"] == f"/plans/{plan.pk}/"
    page = client.get(resp["Location"]).content.decode()
    assert 'id="tradeoff-chart"' in page and 'id="ranked-table"' in page and "plan_detail.js" in page
    assert f"/jobs/new/?plan={plan.pk}&amp;rank=1" in page  # staff may launch
    data = json.loads(re.search(r'id="chart-data" type="application/json">(.*?)</script>', page, re.S).group(1))
    assert data["points"] and data["pareto"] and data["deadline_hours"] == 12


def test_a_user_without_the_launch_permission_sees_no_launch_button(client, user, catalog):
    client.force_login(user)
    client.post("/plans/", FORM)
    page = client.get(f"/plans/{PlanRecord.objects.get().pk}/").content.decode()
    assert "/jobs/new/" not in page


def test_bad_fields_are_shown_inline_and_values_kept(client, user, catalog):
    client.force_login(user)
    resp = client.post("/plans/", {**FORM, "input_shape": "3,x"})
    page = resp.content.decode()
    assert resp.status_code == 400 and "comma-separated" in page and 'value="3,x"' in page
    resp = client.post("/plans/", {**FORM, "deadline_hours": ""})
    assert resp.status_code == 400 and "required for objective" in resp.content.decode()
    assert not PlanRecord.objects.exists()


def test_an_infeasible_request_explains_the_binding_constraint(client, user, catalog):
    client.force_login(user)
    resp = client.post("/plans/", {**FORM, "epochs": "100000", "deadline_hours": "0.2", "max_nodes": "1"})
    page = resp.content.decode()
    assert resp.status_code == 400 and "No plan fits" in page and "deadline_hours" in page


def test_a_plan_can_be_reopened_into_the_form(client, user, catalog):
    client.force_login(user)
    client.post("/plans/", {**FORM, "deadline_hours": "7"})
    page = client.get("/plans/", {"from": PlanRecord.objects.get().pk}).content.decode()
    assert 'name="deadline_hours" value="7' in page
