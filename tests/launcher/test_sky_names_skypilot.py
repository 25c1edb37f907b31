"""SkyPilot itself reads a g7e export's GPU as its catalog names it (issue 37 review): the reader's
catalog (``tests.support.skypilot_venv``) names GPUs as SkyPilot's does, so an export that wrote
our catalog's "RTX PRO Server 6000" would not match the instance type there."""

from __future__ import annotations

import pytest
import yaml

from launcher import taskfile
from tests.launcher.test_task_launch import group, option
from tests.support import skypilot_venv


@pytest.mark.skypilot
def test_skypilot_reads_a_g7e_export_as_rtxpro6000_on_that_type(tmp_path):
    g7e = {**group("g7e.48xlarge", count=2, zone="use1-az2"), "gpu_model": "RTX PRO Server 6000"}
    [(name, text)] = taskfile.to_skypilot({**option(g7e), "region": "us-east-1"})
    assert yaml.safe_load(text)["resources"]["accelerators"] == "RTXPRO6000:8"
    got = skypilot_venv.read_with_skypilot({name: text}, tmp_path)[name]
    assert "error" not in got, got.get("error")
    [res] = got["resources"]
    assert res["instance_type"] == "g7e.48xlarge"
    assert res["accelerators"] == res["catalog_accelerators"] == {"RTXPRO6000": 8}


def test_the_readers_catalog_names_gpus_as_skypilot_does():
    rows = {r["InstanceType"]: r["AcceleratorName"] for r in skypilot_venv._sky_rows()}
    assert rows["g7e.48xlarge"] == "RTXPRO6000" and rows["p4d.24xlarge"] == "A100"
