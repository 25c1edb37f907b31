"""The plan page's launch dialog in a real browser (issue 22 items 9 and 11, issue 23 item 1).

Two plans are stored on the server (``manage.py shell``): one whose option EC2 cannot take (a
type moto's us-east-1 does not offer, in a zone without a subnet), one that it can. The first
shows the pre-check failures with their fixes and no confirm button; the second shows a bad
task file's errors inline with their lines, then, once fixed, the exact launch, and launching
lands on the job page while the worker starts the nodes on moto. A task whose workdir is a local
folder takes that folder as an uploaded archive: a bad one is refused beside the file input, a
good one is listed in the confirm step and becomes what the job's nodes fetch. Screenshots go to
the session's screenshot folder.
"""

from __future__ import annotations

import io
import json
import re
import tarfile

import pytest

from tests.browser.test_gpus_and_profile_charts import server_shell

pytestmark = pytest.mark.browser

STORE_PLAN = """
import json, os
from django.contrib.auth import get_user_model
from planner.app.models import PlanRecord
owner = get_user_model().objects.get(username=os.environ["B_OWNER"])
plan = PlanRecord.objects.create(owner=owner, request={"objective": "cost", "model": {"spec": "torchvision:resnet50"}},
    status="solved", result=json.loads(os.environ["B_RESULT"]))
print("PLAN=%d" % plan.pk)
"""

BAD_TASK = """name: Resnet 50
workdir: ./train
run: ""
envs:
  NODE_RANK: 3
"""

GOOD_TASK = """name: resnet50
workdir: git:https://github.com/example/resnet.git@v1
setup: pip install -r requirements.txt
run: torchrun --nnodes $NNODES --nproc-per-node $NPROC_PER_NODE --node-rank $NODE_RANK --master-addr $MASTER_ADDR --master-port $MASTER_PORT train.py
"""


def option(instance_type: str, zone: str, count: int = 2) -> dict:
    return {
        "rank": 1,
        "region": "us-east-1",
        "label": f"{count}x {instance_type} (spot, {zone})",
        "groups": [
            {
                "instance_type": instance_type,
                "market": "spot",
                "zone": zone,
                "count": count,
                "gpus_per_node": 1,
                "gpu_model": "A10G",
                "price_per_hour": 0.45,
                "batch_per_node": [32] * count,
            }
        ],
        "global_batch": 32 * count,
        "hourly_usd": 0.45 * count,
        "total_usd": 0.9 * count,
        "time_h": 2.0,
        "time_p90_h": 2.4,
        "iter_time_s": 0.5,
        "iter_time_p90_s": 0.6,
        "throughput_sps": 100.0,
        "bottleneck": "compute",
        "why": "cheapest",
    }


def store_plan(server, opt: dict) -> int:
    out = server_shell(server, STORE_PLAN, B_OWNER="root", B_RESULT=json.dumps({"plans": [opt]}))
    match = re.search(r"PLAN=(\d+)", out)
    assert match, out
    return int(match.group(1))


def open_dialog(tab, plan_id: int):
    page = tab.page
    page.goto(f"/plans/{plan_id}/")
    page.click("#launch-open")
    page.wait_for_selector("#launch-dialog[open]")
    return page


@pytest.mark.timeout(120)
def test_the_dialog_shows_failed_pre_checks_with_their_fixes_and_no_launch_button(staff_tab):
    plan_id = store_plan(staff_tab.server, option("x9.fake", "use1-az9"))
    page = open_dialog(staff_tab, plan_id)
    assert (
        page.input_value("#launch-hours") == "3.6" and page.input_value("#launch-spend") == "4"
    )  # 1.5 x p90
    page.fill("#launch-task-text", GOOD_TASK)
    page.click("#launch-review")
    page.wait_for_selector("#launch-check-list li[data-status=error]")
    checks = {
        (li.get_attribute("data-name"), li.get_attribute("data-status")): li.inner_text()
        for li in page.locator("#launch-check-list li").all()
    }
    assert checks[("credentials", "ok")].startswith("✓ credentials: AWS account")
    offering = checks[("offering", "error")]
    assert "EC2 does not offer x9.fake in us-east-1" in offering and "Fix: Re-plan" in offering
    subnet = checks[("subnet", "error")]
    assert "no default subnet is in zone use1-az9" in subnet
    assert (
        "Fix: Create the default subnet (aws ec2 create-default-subnet --availability-zone-id use1-az9"
        in subnet
    )
    assert page.locator("#launch-go").is_hidden() and page.locator("#launch-confirm").is_hidden()
    staff_tab.shot("prechecks-failed")
    assert not staff_tab.errors, staff_tab.errors


@pytest.mark.timeout(180)
def test_the_dialog_shows_task_file_errors_inline_then_launches_the_fixed_file(staff_tab):
    server = staff_tab.server
    plan_id = store_plan(server, option("g5.xlarge", "use1-az1"))
    page = open_dialog(staff_tab, plan_id)
    page.fill("#launch-task-text", BAD_TASK)
    page.click("#launch-review")
    page.wait_for_selector("#launch-task-errors li")
    shown = page.locator("#launch-task-errors li").all_inner_texts()
    assert "line 1 · name: lower-case letters, digits, '-' and '_', at most 63 characters" in shown, shown
    assert any(s.startswith("line 3 · run: ") for s in shown), shown
    assert any(s.startswith("line 5 · envs.NODE_RANK: is set by Srifty") for s in shown), shown
    assert page.locator("#launch-check-list li[data-status=error]").count() == 0  # AWS would take it
    assert page.locator("#launch-go").is_hidden()
    staff_tab.shot("task-errors")

    page.fill("#launch-task-text", "name: t\nworkdir: ./train\nrun: python train.py\n")
    assert page.locator("#launch-workdir-file").is_visible()  # a local workdir asks for its archive
    page.click("#launch-review")
    page.wait_for_selector("#launch-workdir-error:not([hidden])")
    refused = page.inner_text("#launch-workdir-error")
    assert (
        "(line 2), ./train," in refused and "upload the folder as an archive" in refused and "git:" in refused
    )

    page.fill("#launch-task-text", GOOD_TASK)
    assert page.locator("#launch-workdir").is_hidden()  # git: needs no archive
    page.click("#launch-review")
    page.wait_for_selector("#launch-go:not([hidden])")
    assert page.locator("#launch-task-errors").is_hidden()
    assert page.inner_text("#launch-go") == "Launch 2 instances · up to $3.24"  # 3.6 h x $0.90/h
    assert "$0.90 per hour" in page.inner_text("#launch-summary")
    staff_tab.shot("confirm")
    with page.expect_navigation():
        page.click("#launch-go")
    match = re.search(r"/jobs/(\d+)/$", page.url)
    assert match, page.url
    job_id = int(match.group(1))
    job = server.api("GET", f"/api/v1/jobs/{job_id}/")
    assert job["task"] == GOOD_TASK and job["status"] in ("launching", "running")
    assert "every node runs its run" in page.inner_text("#job-task summary")  # not "torchrun … torchrun"
    staff_tab.shot("job")
    # The two refused previews are the browser's "failed to load resource" (a 400 is the answer
    # the dialog shows); anything else is an error.
    unexpected = [e for e in staff_tab.errors if "status of 400" not in e or "/api/v1/jobs/preview/" not in e]
    assert len(staff_tab.errors) - len(unexpected) == 2 and not unexpected, staff_tab.errors


LOCAL_TASK = """name: resnet50
workdir: ./train
setup: pip install -r requirements.txt
run: torchrun --nnodes $NNODES --nproc-per-node $NPROC_PER_NODE --node-rank $NODE_RANK --master-addr $MASTER_ADDR --master-port $MASTER_PORT train.py
"""
WORKDIR = {"train.py": b"print('training')\n", "requirements.txt": b"torch\n", "conf/base.yaml": b"lr: 0.1\n"}
NODE_FETCH = """
import io, os, tarfile
from django.test import Client
from launcher import jobs
from launcher.models import Job
job = Job.objects.get(pk=int(os.environ["B_JOB"]))
# HTTP_HOST: this shell is not a test run, so ALLOWED_HOSTS has no "testserver" here.
got = Client(HTTP_HOST="127.0.0.1").get(f"/api/v1/jobs/{job.pk}/workdir.tar.gz", HTTP_AUTHORIZATION=f"Bearer {jobs.derived_token(job)}")
with tarfile.open(fileobj=io.BytesIO(b"".join(got.streaming_content)), mode="r:gz") as tar:
    print("FILES=" + ",".join(sorted(f"{m.name}:{tar.extractfile(m).read().decode()!r}" for m in tar if m.isfile())))
"""


def tar_gz(files: dict[str, bytes], extra: tarfile.TarInfo | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if extra is not None:
            tar.addfile(extra)
    return buf.getvalue()


@pytest.mark.timeout(180)
def test_the_dialog_uploads_a_local_workdir_as_an_archive_and_the_nodes_fetch_its_files(staff_tab, tmp_path):
    server = staff_tab.server
    plan_id = store_plan(server, option("g5.xlarge", "use1-az1"))
    page = open_dialog(staff_tab, plan_id)
    page.fill("#launch-task-text", LOCAL_TASK)
    assert page.locator("#launch-workdir-file").is_visible()

    link = tarfile.TarInfo("data")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/shadow"
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(tar_gz(WORKDIR, link))
    page.set_input_files("#launch-workdir-file", str(bad))
    page.click("#launch-review")
    page.wait_for_selector("#launch-workdir-error:not([hidden])")
    assert "'data' is a link; only regular files and folders travel" in page.inner_text(
        "#launch-workdir-error"
    )
    assert page.locator("#launch-go").is_hidden()
    staff_tab.shot("archive-refused")

    good = tmp_path / "train.tar.gz"
    good.write_bytes(tar_gz(WORKDIR))
    page.set_input_files("#launch-workdir-file", str(good))
    assert page.locator("#launch-workdir-error").is_hidden()
    page.click("#launch-review")
    page.wait_for_selector("#launch-go:not([hidden])")
    listed = page.inner_text("#launch-workdir-summary")
    assert listed.startswith(f"Workdir: train.tar.gz ({good.stat().st_size} bytes, 3 files)"), listed
    staff_tab.shot("archive-confirm")
    with page.expect_navigation():
        page.click("#launch-go")
    match = re.search(r"/jobs/(\d+)/$", page.url)
    assert match, page.url
    job = server.api("GET", f"/api/v1/jobs/{match.group(1)}/")
    assert job["task"] == LOCAL_TASK and job["status"] in ("launching", "running")
    staff_tab.shot("archive-job")
    fetched = server_shell(server, NODE_FETCH, B_JOB=match.group(1))
    expected = ",".join(sorted(f"{n}:{d.decode()!r}" for n, d in WORKDIR.items()))
    assert f"FILES={expected}" in fetched, fetched
    unexpected = [e for e in staff_tab.errors if "status of 400" not in e or "/api/v1/jobs/preview/" not in e]
    assert len(staff_tab.errors) - len(unexpected) == 1 and not unexpected, staff_tab.errors
