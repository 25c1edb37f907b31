"""A task file without ``run`` (SkyPilot's is optional): read, planned from, exported without a
``run``, and refused only at launch with a message naming ``run`` (issue 37 review)."""

from __future__ import annotations

import pytest
import yaml
from rest_framework.test import APIClient

from launcher import jobs, taskfile
from tests.launcher.test_task_launch import fake, option, owner, plan_of  # noqa: F401

RESOURCES_ONLY = "resources:\n  accelerators: {A100: 8, H100: 8}\n  cpus: 32+\nnum_nodes: 2\n"


def test_a_file_without_run_reads_with_an_empty_run():
    spec = taskfile.parse_task(RESOURCES_ONLY)
    assert spec.run == "" and spec.num_nodes == 2 and spec.resources.cpus == taskfile.Amount(32, True)


@pytest.mark.parametrize("run", ["run:\n", "run: ''\n", "run: '   '\n"])
def test_an_empty_run_reads_as_no_run(run):
    assert taskfile.parse_task(RESOURCES_ONLY + run).run.strip() == ""


def test_launching_a_file_without_run_is_refused_naming_run():
    with pytest.raises(jobs.JobError) as caught:
        jobs.clean_task(RESOURCES_ONLY)
    assert caught.value.field == "task"
    [detail] = caught.value.details
    assert detail["field"] == "run" and "needed to launch" in detail["message"]


def test_a_file_with_run_is_not_refused_for_it():
    assert jobs.clean_task(RESOURCES_ONLY + "run: python train.py\n").run == "python train.py"


@pytest.mark.django_db
def test_the_launch_preview_refuses_a_file_without_run_naming_run(fake, owner):  # noqa: F811
    client = APIClient()
    client.force_authenticate(owner)
    plan = plan_of(owner, option())
    body = {"plan": plan.pk, "rank": 1, "task": RESOURCES_ONLY, "max_spend_usd": "100", "max_hours": 2}
    resp = client.post("/api/v1/jobs/preview/", body, format="json")
    assert resp.status_code == 400
    [problem] = resp.json()["task"]
    assert problem["field"] == "run" and problem["message"].startswith("is needed to launch")


def test_the_skypilot_export_of_a_file_without_run_has_no_run():
    [(_name, text)] = taskfile.to_skypilot(option(), taskfile.parse_task(RESOURCES_ONLY))
    assert "run" not in yaml.safe_load(text)


def test_launching_a_file_as_shown_with_a_redacted_value_is_refused_naming_it():
    shown = taskfile.redacted("envs:\n  HF_TOKEN: hf_abcdefgh\nrun: python train.py\n")
    assert taskfile.parse_task(shown).envs["HF_TOKEN"] == taskfile.REDACTED  # plans as it reads
    with pytest.raises(jobs.JobError) as caught:
        jobs.clean_task(shown)
    [detail] = caught.value.details
    assert detail["field"] == "envs.HF_TOKEN" and "give its value" in detail["message"]
