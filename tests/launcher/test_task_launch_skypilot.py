"""A SkyPilot-dialect task file at launch (issue 37 item 1): an env the file leaves to the launch
(``null``) stops the launch naming it, what is read but not acted on is in the preview's notes
with its line, and a per-region ``image_id`` gives the option's region its AMI."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from launcher import launch
from launcher.models import Job
from tests.launcher.test_task_launch import fake, option, owner, plan_of, task_job  # noqa: F401

pytestmark = pytest.mark.django_db

RUN = "run: torchrun train.py\n"


def _preview(owner, task: str):  # noqa: F811
    client = APIClient()
    client.force_authenticate(owner)
    plan = plan_of(owner, option())
    body = {"plan": plan.pk, "rank": 1, "task": task, "max_spend_usd": "100", "max_hours": 2}
    return client, body, client.post("/api/v1/jobs/preview/", body, format="json")


def test_a_launch_without_an_env_the_file_leaves_to_the_launch_is_a_400_naming_it(fake, owner):  # noqa: F811
    client, body, resp = _preview(owner, "envs:\n  HF_TOKEN: null\n  EPOCHS: 3\n" + RUN)
    assert resp.status_code == 400
    [problem] = resp.json()["task"]
    assert problem["field"] == "envs.HF_TOKEN" and "must be given at launch" in problem["message"]
    made = client.post("/api/v1/jobs/", {**body, "confirmation": "x"}, format="json")
    assert made.status_code == 400 and made.json()["task"][0]["field"] == "envs.HF_TOKEN"
    assert not Job.objects.exists() and fake.params("RunInstances") == []


def test_the_preview_notes_what_the_file_asks_that_srifty_does_not_act_on_with_its_line(fake, owner):  # noqa: F811
    task = "resources:\n  accelerators: {A100: 8, H100: 8}\n  cpus: 32+\n  disk_size: 500\n" + RUN
    _, _, resp = _preview(owner, task)
    assert resp.status_code == 200, resp.content
    notes = resp.json()["task_notes"]
    assert any(n.startswith("line 3: resources.cpus: a minimum: a plan made from this file") for n in notes)
    assert any(n.startswith("line 4: resources.disk_size: kept") for n in notes)


def test_a_per_region_image_gives_the_options_region_its_ami(fake, owner):  # noqa: F811
    task = "resources:\n  image_id:\n    us-east-1: ami-0123456789abcdef0\n    eu-west-1: ami-0fedcba987654321f\n"
    job = task_job(owner, task=task + RUN)
    launch.launch_job(job)
    job.refresh_from_db()
    assert (job.image_id, job.image_source) == ("ami-0123456789abcdef0", "custom")
    assert fake.params("RunInstances")[0]["ImageId"] == "ami-0123456789abcdef0"


def test_manage_py_launch_names_the_envs_the_file_leaves_to_the_launch_and_launches_nothing(
    fake,  # noqa: F811
    owner,  # noqa: F811
    tmp_path,
):
    path = tmp_path / "Fine-Tune.yaml"
    path.write_text("envs: {WANDB_API_KEY: null}\nsecrets: {HF_TOKEN: null}\n" + RUN)
    plan = plan_of(owner, option())
    args = ["--plan", str(plan.pk), "--task", str(path), "--yes", "--no-prechecks", "--user", owner.username]
    with pytest.raises(CommandError, match="WANDB_API_KEY, HF_TOKEN must be given at launch"):
        call_command("launch", *args)
    assert not Job.objects.exists()
