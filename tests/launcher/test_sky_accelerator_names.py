"""SkyPilot exports name a GPU as SkyPilot's AWS catalog does (issue 37 item 1): a g7e plan's GPU
is "RTX PRO Server 6000" in EC2 and in our catalog, ``RTXPRO6000`` in SkyPilot 0.14.1's, and
``sky launch`` finds no instance type for a name its catalog lacks. The table
(``taskfile.SKY_ACCELERATOR_BY_*``) is checked against the renames in SkyPilot's own AWS
catalog fetcher when its venv is there (``SRIFTY_SKYPILOT_PYTHON``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from launcher import taskfile
from tests.launcher.test_task_launch import group, option
from tests.support import skypilot_venv


def exported_accelerators(instance_type: str, gpu_model: str, gpus: int = 8) -> str:
    plan = option({**group(instance_type, count=1, gpus=gpus), "gpu_model": gpu_model})
    [(_, text)] = taskfile.to_skypilot(plan)
    return yaml.safe_load(text)["resources"]["accelerators"]


def test_it_names_a_g7e_gpu_rtxpro6000_as_skypilots_catalog_does():
    assert exported_accelerators("g7e.48xlarge", "RTX PRO Server 6000") == "RTXPRO6000:8"
    assert exported_accelerators("g7e.2xlarge", "RTX PRO Server 6000", gpus=1) == "RTXPRO6000:1"


def test_it_names_the_types_skypilot_renames_by_instance_type_as_skypilot_does():
    # EC2 calls p4de's GPU "A100" and p5e's "H200"; SkyPilot's catalog: A100-80GB, H200
    assert exported_accelerators("p4de.24xlarge", "A100") == "A100-80GB:8"
    assert exported_accelerators("p3dn.24xlarge", "V100") == "V100-32GB:8"
    assert exported_accelerators("p5en.48xlarge", "H200") == "H200:8"


def test_it_keeps_our_name_where_skypilot_uses_ec2s_own():
    assert exported_accelerators("p4d.24xlarge", "A100") == "A100:8"
    assert exported_accelerators("g6e.12xlarge", "L40S", gpus=4) == "L40S:4"
    assert exported_accelerators("p5.48xlarge", "H100") == "H100:8"


def test_an_rtx_pro_name_on_a_type_the_table_does_not_list_is_still_renamed():
    assert taskfile.sky_accelerator("g7f.8xlarge", "RTX PRO Server 6000") == "RTXPRO6000"


def test_the_g7e_export_reads_back_as_a_skypilot_task_with_that_accelerator():
    plan = option({**group("g7e.48xlarge", count=2), "gpu_model": "RTX PRO Server 6000"})
    [(_, text)] = taskfile.to_skypilot(plan)
    spec = taskfile.parse_task(text)  # "RTX PRO Server 6000:8" was not even an accelerator here
    assert spec.resources.instance_type == "g7e.48xlarge" and spec.num_nodes == 2
    assert (spec.resources.accelerator, spec.resources.accelerator_count) == ("RTXPRO6000", 8)


def skypilot_renames(source: str) -> tuple[dict[str, str], dict[str, str]]:
    """(instance type -> name, type prefix -> name) that SkyPilot's ``fetch_aws.py`` writes over
    EC2's GPU name: each ``if``/``elif`` on ``row['InstanceType']`` whose body sets ``acc_name``."""
    exact: dict[str, str] = {}
    prefix: dict[str, str] = {}
    types: list[str] = []
    prefixes: list[str] = []
    for line in source.splitlines():
        stripped = line.strip()
        if re.match(r"(el)?if\b.*row\['InstanceType'\]", stripped):
            types = re.findall(r"'([a-z0-9.-]+\.[a-z0-9]+)'", stripped.split("startswith")[0])
            prefixes = re.findall(r"startswith\('([a-z0-9-]+)'\)", stripped)
        elif re.match(r"(el)?if\b|else\b|return\b", stripped):
            types, prefixes = [], []
        elif m := re.match(r"acc_name = '([^']+)'", stripped):
            exact.update(dict.fromkeys(types, m.group(1)))
            prefix.update(dict.fromkeys(prefixes, m.group(1)))
    return exact, prefix


def test_the_table_is_the_renames_of_skypilots_own_aws_catalog_fetcher():
    python = Path(skypilot_venv.skypilot_python())  # skips, saying why, without the venv
    found = sorted(
        python.parents[1].glob("lib/python3*/site-packages/sky/catalog/data_fetchers/fetch_aws.py")
    )
    assert found, f"no sky/catalog/data_fetchers/fetch_aws.py in {python.parents[1]}"
    exact, prefix = skypilot_renames(found[0].read_text())
    assert exact == taskfile.SKY_ACCELERATOR_BY_TYPE
    assert prefix == taskfile.SKY_ACCELERATOR_BY_FAMILY


def test_the_source_reader_finds_a_rename_and_ignores_a_branch_that_sets_no_name():
    source = """
            if row['InstanceType'] == 'p9.48xlarge':
                acc_name = 'X100'
            elif (row['InstanceType'].startswith('g6f') or
                  row['InstanceType'].startswith('gr6f')):
                acc_count = 0.5
            elif row['InstanceType'].startswith('g9'):
                acc_name = 'Y9'
            return pd.Series({})
    """
    assert skypilot_renames(source) == ({"p9.48xlarge": "X100"}, {"g9": "Y9"})


SKY_NAMES = {
    *taskfile.SKY_ACCELERATOR_BY_TYPE.values(),
    *taskfile.SKY_ACCELERATOR_BY_FAMILY.values(),
    *taskfile.SKY_ACCELERATOR_BY_NAME.values(),
}


@pytest.mark.parametrize("name", sorted(SKY_NAMES))
def test_every_skypilot_name_is_one_our_task_reader_takes(name):
    assert taskfile.ACCEL_RE.match(f"{name}:8")
