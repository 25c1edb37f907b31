"""A launch on a server without AWS credentials, in a real browser (issue 38 item 2).

Before, the plan row's "Launch…" offered "Launch 1 instance · up to $…", and the job then failed
with a raw ``ec2.create_placement_group failed: Unable to locate credentials``; its page showed
a spend, a re-plan button, an empty chart, a placement group that was never created and a
deadline-guard sentence. Now the row's launch page asks the same pre-checks as the task-file
dialog and shows each failure with its fix, and no launch button; and a job whose launch failed
before any node says "nothing was started, nothing was spent" and nothing else of a cluster.

The session's server has moto's credentials. These tests start a second ``daphne`` on the same
data folder (same database, users and plans) whose environment has none: boto3's whole chain
comes up empty there, as on a fresh clone.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys

import pytest

from profiler.agent.comm import free_port
from tests.browser.conftest import ROOT, STAFF, Tab, _stop, _wait_http
from tests.browser.test_gpus_and_profile_charts import server_shell
from tests.browser.test_launch_dialog import STORE_PLAN, open_dialog, option

pytestmark = pytest.mark.browser

AWS_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")

# A job launched on the server without credentials: created (the tasks go nowhere), then its
# launch task's body run here, where boto3 finds no credentials, as the worker would.
LAUNCH_WITHOUT_CREDENTIALS = """
import os
from decimal import Decimal
from django.contrib.auth import get_user_model
from launcher import jobs, launch
from planner.app.models import PlanRecord
owner = get_user_model().objects.get(username=os.environ["B_OWNER"])
plan = PlanRecord.objects.get(pk=int(os.environ["B_PLAN"]))
job = jobs.create_job(owner, plan, 1, "train.py", Decimal("20"), 5, confirm=True)
print("LAUNCH=" + launch.launch_job(job))
print("JOB=%d" % job.pk)
"""


def without_credentials(env: dict) -> dict:
    out = {k: v for k, v in env.items() if k not in AWS_KEYS}
    none = os.path.join(env["SRIFTY_DATA_DIR"], "no-aws-here")
    out.update(
        {"AWS_SHARED_CREDENTIALS_FILE": none, "AWS_CONFIG_FILE": none, "AWS_EC2_METADATA_DISABLED": "true"}
    )
    return out


@pytest.fixture(scope="module")
def dry(server):
    """The second server: the same database, no AWS credentials (no worker: nothing is queued)."""
    port = free_port()
    env = without_credentials(server.env)
    log = server.data_dir / "daphne-dry.log"
    with open(log, "ab") as fh:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "daphne",
                "-b",
                "127.0.0.1",
                "-p",
                str(port),
                "srifty_web.asgi:application",
            ],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_http(f"{url}/accounts/login/", proc, log)
        yield dataclasses.replace(
            server, url=url, env=env, logs={**server.logs, "daphne-dry": log}, procs=[("daphne-dry", proc)]
        )
    finally:
        _stop(proc)


@pytest.fixture
def dry_tab(browser, dry, screenshot_dir, request):
    tab = Tab(browser, dry, screenshot_dir, request.node.name)
    tab.login(STAFF)
    yield tab
    tab.close()


def store_plan(server, opt: dict) -> int:
    """A solved one-option plan of root's, with the model block a solved plan's result has."""
    model = {"spec": "torchvision:resnet50", "precision": "fp16", "source": "analytical"}
    out = server_shell(
        server, STORE_PLAN, B_OWNER="root", B_RESULT=json.dumps({"plans": [opt], "model": model})
    )
    match = re.search(r"PLAN=(\d+)", out)
    assert match, out
    return int(match.group(1))


def jobs_of(server, plan_id: int) -> list[int]:
    found = server.api("GET", "/api/v1/jobs/?page_size=100")
    rows = found["results"] if isinstance(found, dict) else found
    return [j["id"] for j in rows if j["plan"] == plan_id]


@pytest.mark.timeout(240)
def test_the_row_launch_without_credentials_shows_the_failed_checks_with_fixes_and_no_launch(dry_tab):
    server, page = dry_tab.server, dry_tab.page
    plan_id = store_plan(server, option("g5.xlarge", "use1-az1", count=1))
    page.goto(f"/plans/{plan_id}/")
    with page.expect_navigation(url=re.compile(r"/jobs/new/")):
        page.click(f"a[href$='/jobs/new/?plan={plan_id}&rank=1']")
    check = page.locator("#precheck-list li[data-name=credentials]")
    assert check.get_attribute("data-status") == "error"
    assert "Unable to locate credentials" in check.inner_text()
    assert "AWS_ACCESS_KEY_ID" in check.locator(".check-fix").inner_text()  # the dialog's fix text
    assert page.is_visible("#prechecks-failed") and page.locator("#launch-button").count() == 0
    assert page.inner_text("#review-button") == "Check again"
    dry_tab.shot("row-launch")
    page.fill("input[name=train_command]", "train.py --epochs 1")
    with page.expect_navigation():
        page.click("#review-button")  # asked again: still refused, no confirmation to send
    assert page.locator("#precheck-list li[data-name=credentials]").get_attribute("data-status") == "error"
    assert (
        page.locator("#launch-button").count() == 0 and page.locator("input[name=confirmation]").count() == 0
    )
    dry_tab.shot("check-again")
    assert jobs_of(server, plan_id) == []
    assert not [e for e in dry_tab.errors if "status of 400" not in e], dry_tab.errors


@pytest.mark.timeout(240)
def test_the_task_file_dialog_without_credentials_says_the_same(dry_tab):
    plan_id = store_plan(dry_tab.server, option("g5.xlarge", "use1-az1", count=1))
    page = open_dialog(dry_tab, plan_id)
    page.fill("#launch-task-text", "name: t\nrun: python train.py\n")
    page.click("#launch-review")
    page.wait_for_selector("#launch-checks:not([hidden]) li[data-name=credentials]")
    item = page.locator("#launch-check-list li[data-name=credentials]")
    assert item.get_attribute("data-status") == "error" and "AWS_ACCESS_KEY_ID" in item.inner_text()
    assert page.is_hidden("#launch-go")
    dry_tab.shot("dialog")


@pytest.mark.timeout(240)
def test_a_job_that_failed_before_creating_anything_says_nothing_was_started_nothing_was_spent(dry_tab):
    server, page = dry_tab.server, dry_tab.page
    plan_id = store_plan(server, option("g5.xlarge", "use1-az1", count=1))
    out = server_shell(
        server,
        LAUNCH_WITHOUT_CREDENTIALS,
        B_OWNER="root",
        B_PLAN=str(plan_id),
        TASKS_BACKEND="django_tasks.backends.dummy.DummyBackend",
    )
    assert "LAUNCH=failed to launch" in out, out
    job_id = int(re.search(r"JOB=(\d+)", out).group(1))
    page.goto(f"/jobs/{job_id}/")
    assert page.inner_text("#never-started") == "nothing was started, nothing was spent"
    assert "Unable to locate credentials" in page.inner_text("#reason")
    body = page.inner_text("main") if page.locator("main").count() else page.inner_text("body")
    for absent in ("Spent so far", "Re-plan", "Placement group", "Deadline guard", "Iteration time"):
        assert absent not in body, absent
    assert page.locator("#iter-chart").count() == 0 and page.locator("#replan-form").count() == 0
    dry_tab.shot("never-started")
    page.goto("/jobs/")
    row = page.locator(f"#jobs-table tr:has(a[href='/jobs/{job_id}/'])")
    assert "nothing spent" in row.inner_text() and "never started" in row.inner_text()
    dry_tab.shot("job-list")
    assert not dry_tab.errors, dry_tab.errors
