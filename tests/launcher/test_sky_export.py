"""Any plan option as SkyPilot task files (issue 23 item 1): ``manage.py plan --export-sky DIR``
and the download the plan page's launch dialog links to; a mixed-type option is one file per
type with a note. The files read back with ``launcher.taskfile`` (SkyPilot dialect)."""

from __future__ import annotations

import io
import zipfile

import pytest
import yaml
from django.core.management import call_command
from rest_framework.test import APIClient

from launcher import taskfile
from planner.app.models import PlanRecord
from tests.launcher.test_task_launch import group, option

pytestmark = pytest.mark.django_db


def test_the_plan_command_writes_the_option_as_a_skypilot_file_that_reads_back(
    db, catalog, staff, tmp_path, capsys
):
    args = ["--model", "torchvision:squeezenet1_1", "--input-shape", "3,32,32", "--samples", "100000"]
    args += ["--epochs", "5", "--objective", "cost", "--deadline-hours", "12", "--regions", "us-east-1"]
    call_command("plan", *args, "--export-sky", str(tmp_path / "sky"), "--json")
    plan = PlanRecord.objects.get()
    first = plan.option(1)
    assert first is not None
    written = sorted((tmp_path / "sky").iterdir())
    assert len(written) == len({g["instance_type"] for g in first["groups"]}) == 1
    spec = taskfile.parse_task(written[0].read_text())
    assert spec.dialect == "skypilot" and spec.num_nodes == sum(g["count"] for g in first["groups"])
    assert (
        spec.resources.instance_type == first["groups"][0]["instance_type"]
        and spec.resources.region == "us-east-1"
    )
    assert taskfile.plan_conflicts(spec, first) == []  # the file asks for exactly the option
    assert f"wrote {written[0]}" in capsys.readouterr().err


def test_the_download_is_the_yaml_for_one_type_and_a_zip_with_a_note_for_a_mix(user):
    mixed = option(group("p4d.24xlarge", count=2), group("g5.xlarge", count=1, gpus=1, batch=32), rank=2)
    plan = PlanRecord.objects.create(
        owner=user, request={}, status="solved", result={"plans": [option(), mixed]}
    )
    client = APIClient()
    client.force_authenticate(user)
    one = client.get("/api/v1/jobs/sky-export/", {"plan": plan.pk, "rank": 1})
    assert one.status_code == 200 and one["Content-Type"] == "application/yaml"
    assert f'filename="plan-{plan.pk}-' in one["Content-Disposition"]
    doc = yaml.safe_load(one.content)
    assert doc["num_nodes"] == 2 and doc["resources"]["accelerators"] == "A100:8"
    both = client.get("/api/v1/jobs/sky-export/", {"plan": plan.pk, "rank": 2})
    assert both["Content-Type"] == "application/zip"
    archive = zipfile.ZipFile(io.BytesIO(both.content))
    names = sorted(archive.namelist())
    assert names == ["README.txt", *sorted(n for n in names if n.endswith(".sky.yaml"))] and len(names) == 3
    assert "mixes 2 instance types" in archive.read("README.txt").decode()
    for name in names[1:]:
        text = archive.read(name).decode()
        assert (
            text.startswith("# Srifty plan option 2") and "# NOTE: this plan mixes 2 instance types" in text
        )
    assert client.get("/api/v1/jobs/sky-export/", {"plan": plan.pk, "rank": 9}).json() == {
        "rank": ["the plan has no option 9"]
    }
    stranger = APIClient()
    stranger.force_authenticate(type(user).objects.create_user("mallory", password="x"))
    assert (
        stranger.get("/api/v1/jobs/sky-export/", {"plan": plan.pk, "rank": 1}).status_code == 400
    )  # not theirs
