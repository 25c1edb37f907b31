"""The plan form takes a task file (issue 37 item 2): pasted or uploaded; the plan page says which
constraints came from it."""

import html

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from planner.app.models import PlanRecord
from tests.support.plans import PLAN_FORM as FORM

pytestmark = pytest.mark.django_db

TASK = "resources:\n  accelerators: {A100: 8, H100: 8}\n  cpus: 32+\n  use_spot: true\nrun: python train.py\n"


def solve_queued() -> None:
    from planner.app.tasks import solve_plan_task

    for pk in PlanRecord.objects.filter(status="queued").values_list("pk", flat=True):
        solve_plan_task.call(pk)


def test_an_uploaded_task_file_constrains_the_plan_and_the_page_lists_what_came_from_it(
    client, staff, catalog
):
    client.force_login(staff)
    upload = SimpleUploadedFile("train.sky.yaml", TASK.encode(), content_type="text/yaml")
    resp = client.post("/plans/", {**FORM, "task_file": upload})
    assert resp.status_code == 302, resp.content.decode()[:2000]
    plan = PlanRecord.objects.get()
    assert plan.request["task"] == TASK and plan.request["task_filename"] == "train.sky.yaml"
    assert plan.request["on_demand"] is False
    solve_queued()
    plan.refresh_from_db()
    assert plan.status == "solved", plan.error
    for p in plan.result["plans"]:
        assert all(g["gpu_model"] in ("A100", "H100") and g["market"] == "spot" for g in p["groups"])
    page = html.unescape(client.get(resp["Location"]).content.decode())
    assert 'id="task-constraints"' in page and "From the task file" in page and "train.sky.yaml" in page
    assert "accelerators: A100:8 or H100:8</code> (line 2)" in page
    assert "cpus: 32+</code> (line 3)" in page and "use_spot: true</code> (line 4)" in page


def test_a_pasted_task_file_that_is_not_yaml_is_shown_again_with_its_line(client, staff, catalog):
    client.force_login(staff)
    resp = client.post("/plans/", {**FORM, "task": "run: [python\nresources: {\n"})
    assert resp.status_code == 400
    page = html.unescape(resp.content.decode())
    assert 'id="task-error"' in page and "not valid YAML" in page and "line " in page
    assert "run: [python" in page  # the textarea keeps what was pasted
    assert not PlanRecord.objects.exists()


def test_a_task_file_the_form_rules_out_is_an_error_at_that_field(client, staff, catalog):
    client.force_login(staff)
    task = "resources:\n  use_spot: false\nrun: python train.py\n"
    resp = client.post("/plans/", {**{k: v for k, v in FORM.items() if k != "on_demand"}, "task": task})
    assert resp.status_code == 400
    assert "use_spot: false" in html.unescape(resp.content.decode())


def test_a_plan_without_a_task_file_has_no_such_list_and_edit_keeps_the_file(client, staff, catalog):
    client.force_login(staff)
    client.post("/plans/", FORM)
    plain = PlanRecord.objects.get()
    assert "task" not in plain.request
    assert 'id="task-constraints"' not in client.get(f"/plans/{plain.pk}/").content.decode()
    client.post("/plans/", {**FORM, "task": TASK})
    made = PlanRecord.objects.exclude(pk=plain.pk).get()
    again = html.unescape(client.get(f"/plans/?from={made.pk}").content.decode())
    assert "accelerators: {A100: 8, H100: 8}" in again
