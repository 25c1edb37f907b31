"""The launch dialog asks for the values a task file leaves to the launch (issue 37 item 1):
SkyPilot's ``envs: {HF_TOKEN: null}`` and ``secrets: {WANDB_API_KEY: null}``. Reviewing such a
file shows one input per name (a password input where the value is a secret), the values go with
the preview and the launch, the job's nodes get them, and no page or answer shows a secret back.
"""

from __future__ import annotations

import re

import pytest

from tests.browser.test_gpus_and_profile_charts import server_shell
from tests.browser.test_launch_dialog import open_dialog, option, store_plan

pytestmark = pytest.mark.browser

TOKEN = "hf_browser0123456789SECRET"
WANDB = "wandb-browser-9876543210"
TASK = """name: fine-tune
envs:
  HF_TOKEN: null
  MODEL: null
  EPOCHS: 3
secrets: {WANDB_API_KEY: null}
run: torchrun --nnodes $NNODES --nproc-per-node $NPROC_PER_NODE --node-rank $NODE_RANK --master-addr $MASTER_ADDR --master-port $MASTER_PORT train.py
"""
NODE_ENV = """
import os
from launcher import options, taskfile
from launcher.models import Job
job = Job.objects.get(pk=int(os.environ["B_JOB"]))
spec = options.task_spec(job.task, job.train_command)
env = taskfile.node_env(spec, job.option, 0, ["10.0.0.1", "10.0.0.2"])
same = (env["HF_TOKEN"], env["WANDB_API_KEY"], env["MODEL"]) == (os.environ["B_TOKEN"], os.environ["B_WANDB"], "llama")
print("NODE_ENV=" + ("given" if same else "missing"))
"""


@pytest.mark.timeout(180)
def test_the_dialog_asks_for_each_value_the_task_leaves_to_the_launch_and_never_shows_a_secret(staff_tab):
    server = staff_tab.server
    plan_id = store_plan(server, option("g5.xlarge", "use1-az1"))
    page = open_dialog(staff_tab, plan_id)
    page.fill("#launch-task-text", TASK)
    page.click("#launch-review")
    page.wait_for_selector("#launch-envs:not([hidden]) input[data-env]")
    inputs = {
        i.get_attribute("data-env"): i.get_attribute("type") for i in page.locator("#launch-envs input").all()
    }
    assert inputs == {"HF_TOKEN": "password", "MODEL": "text", "WANDB_API_KEY": "password"}
    asked = page.inner_text("#launch-env-errors")
    assert asked == "Give values for HF_TOKEN, MODEL, WANDB_API_KEY, then review again.", asked
    assert page.locator("#launch-task-errors").is_hidden()  # asked for, not listed as errors
    assert page.locator("#launch-go").is_hidden()
    staff_tab.shot("envs-asked")

    page.fill("#launch-env-HF_TOKEN", TOKEN)
    page.fill("#launch-env-WANDB_API_KEY", WANDB)
    page.click("#launch-review")  # MODEL left empty: asked again
    page.wait_for_selector("#launch-env-errors:not([hidden])")
    assert page.inner_text("#launch-env-errors") == "Give a value for MODEL, then review again."
    page.fill("#launch-env-MODEL", "llama")
    page.click("#launch-review")
    page.wait_for_selector("#launch-go:not([hidden])")
    assert "Given at launch: HF_TOKEN, MODEL, WANDB_API_KEY" in page.inner_text("#launch-notes")
    html = page.content()
    assert TOKEN not in html and WANDB not in html  # typed into inputs, never written into the page
    staff_tab.shot("envs-confirm")

    with page.expect_navigation():
        page.click("#launch-go")
    match = re.search(r"/jobs/(\d+)/$", page.url)
    assert match, page.url
    job_page = page.content()
    assert TOKEN not in job_page and WANDB not in job_page
    job = server.api("GET", f"/api/v1/jobs/{match.group(1)}/")
    assert "HF_TOKEN: '<redacted>'" in job["task"] and "MODEL: 'llama'" in job["task"]
    assert TOKEN not in str(job) and WANDB not in str(job)
    out = server_shell(server, NODE_ENV, B_JOB=match.group(1), B_TOKEN=TOKEN, B_WANDB=WANDB)
    assert "NODE_ENV=given" in out, out
    staff_tab.shot("envs-job")
    # The two previews that asked for values are 400s (the answer the dialog shows).
    unexpected = [e for e in staff_tab.errors if "status of 400" not in e or "/api/v1/jobs/preview/" not in e]
    assert len(staff_tab.errors) - len(unexpected) == 2 and not unexpected, staff_tab.errors
