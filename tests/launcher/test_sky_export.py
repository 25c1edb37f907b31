"""Any plan option as SkyPilot task files (issue 23 item 1): ``manage.py plan --export-sky DIR``
and the download the plan page's launch dialog links to; a mixed-type option is one file per
type with a note. The files read back with ``launcher.taskfile`` (SkyPilot dialect), run under
``sky launch`` (the torchrun preamble in real bash) and read in SkyPilot 0.14.1 itself (issue 37
items 3 and 4; ``tests.support.skypilot_venv``, skipped without ``SRIFTY_SKYPILOT_PYTHON``)."""

from __future__ import annotations

import io
import re
import subprocess
import textwrap
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command
from rest_framework.test import APIClient

from launcher import skyexport, spot_policy, taskfile
from planner.app.models import PlanRecord
from tests.launcher.test_task_launch import group, option
from tests.launcher.test_taskfile_skypilot import DISTRIBUTED
from tests.support import skypilot_venv

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


# ------------------------------------------------------------------ exports that run (issue 37)
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "task.yaml"
NAME_RE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")


def _sky_node_env(doc: dict, rank: int, ips: list[str], gpus: int) -> dict[str, str]:
    """What ``sky launch`` gives node ``rank`` of a task: the file's envs and SkyPilot's names,
    nothing of Srifty's (a bare PATH, no HOME)."""
    env = {k: str(v) for k, v in doc.get("envs", {}).items() if v is not None}
    env.update(
        PATH="/usr/bin:/bin",
        SKYPILOT_NODE_RANK=str(rank),
        SKYPILOT_NODE_IPS="\n".join(ips),
        SKYPILOT_NUM_NODES=str(len(ips)),
        SKYPILOT_NUM_GPUS_PER_NODE=str(gpus),
        SKYPILOT_TASK_ID="sky-2026-12-07-15-00-00-000000_srifty_1",
        SKYPILOT_CLUSTER_INFO='{"cluster_name": "srifty", "cloud": "AWS", "region": "us-east-1"}',
    )
    return env


def _run_in_bash(script: str, env: dict[str, str], tmp_path: Path) -> list[str]:
    """``script`` run by real bash under ``env``, with a ``torchrun`` on PATH that prints its
    arguments one per line (what the node's torchrun would have been given)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "torchrun"
    fake.write_text('#!/bin/bash\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    fake.chmod(0o755)
    env = {**env, "PATH": f"{bin_dir}:{env['PATH']}"}
    done = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, check=True, timeout=30
    )
    return done.stdout.splitlines()


def _flags(argv: list[str]) -> dict[str, str]:
    return {a: argv[i + 1] for i, a in enumerate(argv[:-1]) if a.startswith("--")}


@pytest.mark.parametrize("with_task", [True, False], ids=["examples-task", "template"])
def test_an_export_under_sky_launch_gives_torchrun_a_value_for_every_name_it_uses(tmp_path, with_task):
    spec = taskfile.parse_task(EXAMPLE.read_text(), EXAMPLE) if with_task else None
    [(_, text)] = taskfile.to_skypilot(option(), spec)
    doc = yaml.safe_load(text)
    ips = ["10.0.1.11", "10.0.1.12"]
    env = _sky_node_env(doc, rank=1, ips=ips, gpus=8)
    user_run = spec.run if spec else taskfile.DEFAULT_SKY_RUN
    names = sorted(set(NAME_RE.findall(user_run)))
    assert {"NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "NPROC_PER_NODE"} <= set(names)
    preamble = doc["run"][: -len(user_run)]
    echoed = _run_in_bash(preamble + "".join(f'printf "%s\\n" "${n}"\n' for n in names), env, tmp_path)
    assert [n for n, value in zip(names, echoed, strict=True) if not value] == []  # none is empty
    argv = _run_in_bash(doc["run"], env, tmp_path)
    flags = _flags(argv)
    assert (flags["--nnodes"], flags["--node-rank"], flags["--nproc-per-node"]) == ("2", "1", "8")
    assert (flags["--master-addr"], flags["--master-port"]) == ("10.0.1.11", "29500")
    assert flags["--batch-per-node" if spec else "--batch"] == "256"
    if spec:
        assert flags["--checkpoint-dir"] == taskfile.CHECKPOINT_DIR


def test_the_master_port_given_at_launch_is_kept_and_each_cluster_of_a_mix_gets_its_own_names(tmp_path):
    mixed = option(
        group("p4d.24xlarge", count=2), {**group("g5.xlarge", count=1, gpus=1, batch=32), "gpu_model": "A10G"}
    )
    files = dict(taskfile.to_skypilot(mixed))
    g5 = yaml.safe_load(files["srifty-plan-option-1-g5-xlarge.sky.yaml"])
    env = {**_sky_node_env(g5, rank=0, ips=["10.0.2.7"], gpus=1), "MASTER_PORT": "31337"}  # sky launch --env
    flags = _flags(_run_in_bash(g5["run"], env, tmp_path))
    assert (flags["--nnodes"], flags["--node-rank"], flags["--nproc-per-node"]) == ("1", "0", "1")
    assert (flags["--master-addr"], flags["--master-port"], flags["--batch"]) == ("10.0.2.7", "31337", "32")
    text = files["srifty-plan-option-1-p4d-24xlarge.sky.yaml"]
    assert "# NOTE: this plan mixes 2 instance types" in text and "that cluster's own" in text


def test_run_and_setup_are_literal_blocks_and_the_preamble_is_written_once():
    spec = taskfile.parse_task(EXAMPLE.read_text(), EXAMPLE)
    [(_, text)] = taskfile.to_skypilot(option(), spec)
    assert "\nsetup: |\n  python -m pip install --quiet torchvision\n" in text
    run = taskfile.with_sky_preamble(spec.run, 8)
    assert text.endswith("\nrun: |\n" + textwrap.indent(run, "  "))  # line for line, nothing escaped
    again = taskfile.parse_task(text)
    [(_, twice)] = taskfile.to_skypilot(option(), again)
    assert twice.count(taskfile.SKY_PREAMBLE_MARK) == 1  # an export exported again keeps one


def test_a_checkpoint_becomes_a_bucket_mount_with_the_node_scripts_values():
    spec = taskfile.parse_task(EXAMPLE.read_text(), EXAMPLE)  # checkpoint: {s3: ..., interval: auto}
    spot = option(group(market="spot", zone="use1-az1"))
    [(_, text)] = taskfile.to_skypilot(spot, spec, checkpoint_interval_s=1234.4)
    doc = yaml.safe_load(text)
    prefix = "s3://my-team-checkpoints/resnet50"
    assert doc["file_mounts"][taskfile.CHECKPOINT_DIR] == {"source": prefix, "mode": "MOUNT_CACHED"}
    assert {k: doc["envs"][k] for k in doc["envs"] if k.startswith("SRIFTY_CHECKPOINT")} == {
        "SRIFTY_CHECKPOINT_DIR": taskfile.CHECKPOINT_DIR,
        "SRIFTY_CHECKPOINT_S3": prefix,
        "SRIFTY_CHECKPOINT_INTERVAL_S": "1234",
    }
    fixed = taskfile.parse_task(EXAMPLE.read_text().replace("interval: auto", "interval: 45m"))
    [(_, text)] = taskfile.to_skypilot(spot, fixed, checkpoint_interval_s=1234.0)
    assert yaml.safe_load(text)["envs"]["SRIFTY_CHECKPOINT_INTERVAL_S"] == "2700"  # the file's own


def test_auto_checkpoints_get_the_interval_a_srifty_launch_would_set():
    spec = taskfile.parse_task(EXAMPLE.read_text(), EXAMPLE)
    spot = option(group(market="spot"))
    minutes, _ = spot_policy.option_interval_min(spot["groups"], 90.0, None)
    assert skyexport.checkpoint_interval_s(spot, spec, 90.0) == pytest.approx(minutes * 60)
    assert skyexport.checkpoint_interval_s(spot, None, 90.0) is None


def test_a_git_workdir_is_exported_as_url_and_ref():
    spec = taskfile.parse_task("workdir: git:https://github.com/org/repo.git@v1.2\nrun: python train.py\n")
    [(_, text)] = taskfile.to_skypilot(option(), spec)
    assert yaml.safe_load(text)["workdir"] == {"url": "https://github.com/org/repo.git", "ref": "v1.2"}
    head = taskfile.parse_task("workdir: git:https://github.com/org/repo.git\nrun: python train.py\n")
    [(_, text)] = taskfile.to_skypilot(option(), head)
    assert yaml.safe_load(text)["workdir"] == {"url": "https://github.com/org/repo.git", "ref": "HEAD"}


def test_the_zone_whose_price_won_is_pinned_by_name_or_named_in_the_header():
    by_name = option(group(market="spot", zone="us-east-1c"))
    [(_, text)] = taskfile.to_skypilot(by_name)
    assert yaml.safe_load(text)["resources"]["infra"] == "aws/us-east-1/us-east-1c"
    by_id = option(group(market="spot", zone="use1-az4"))
    [(_, text)] = taskfile.to_skypilot(by_id)
    assert yaml.safe_load(text)["resources"]["infra"] == "aws/us-east-1"
    assert "zone ID use1-az4" in text and "--zone-ids use1-az4" in text
    [(_, text)] = taskfile.to_skypilot(by_id, zone_names={"use1-az4": "us-east-1d"})
    assert yaml.safe_load(text)["resources"]["infra"] == "aws/us-east-1/us-east-1d"
    assert "# The price that won is in zone use1-az4 (us-east-1d)." in text
    two = option(
        group(market="spot", zone="use1-az4", count=1), group(market="spot", zone="use1-az6", count=1)
    )
    [(_, text)] = taskfile.to_skypilot(two)
    assert yaml.safe_load(text)["resources"]["infra"] == "aws/us-east-1" and "zone" not in text


def test_the_export_runs_the_files_image_for_the_plans_region():
    regions = "resources:\n  image_id: {us-east-1: ami-0123456789abcdef0, us-west-2: ami-0fedcba987654321f}\n"
    [(_, text)] = taskfile.to_skypilot(option(), taskfile.parse_task(regions + "run: python train.py\n"))
    assert yaml.safe_load(text)["resources"]["image_id"] == "ami-0123456789abcdef0"
    docker = "resources: {image_id: docker:nvcr.io/nvidia/pytorch:24.01-py3}\nrun: python train.py\n"
    [(_, text)] = taskfile.to_skypilot(option(), taskfile.parse_task(docker))
    assert yaml.safe_load(text)["resources"]["image_id"] == "docker:nvcr.io/nvidia/pytorch:24.01-py3"


def test_an_export_read_back_means_what_the_task_meant():
    spec = taskfile.parse_task(
        "name: llm-ft\n"
        "workdir: {url: https://github.com/org/repo.git, ref: main}\n"
        "resources: {accelerators: {A100: 8, H100: 8}, use_spot: true}\n"
        "envs: {EPOCHS: 3, DATASET: null}\n"
        "secrets: {HF_TOKEN: null}\n"
        "file_mounts:\n  /data: s3://bucket/data\n  /out: {name: my-out, mode: MOUNT}\n"
        "checkpoint: {s3: s3://bucket/ckpt, interval: 30m}\n"
        "setup: |\n  pip install -r requirements.txt\n"
        "run: |\n  torchrun --nnodes $NNODES train.py\n"
    )
    spot = option(group(market="spot", zone="us-east-1c"))
    [(_, text)] = taskfile.to_skypilot(spot, spec)
    back = taskfile.parse_task(text)
    assert (back.name, back.workdir, back.setup) == (spec.name, spec.workdir, spec.setup)
    assert back.run.endswith(spec.run) and back.run.startswith(taskfile.SKY_PREAMBLE_MARK)
    assert {k: v for k, v in back.envs.items() if not k.startswith("SRIFTY_")} == spec.envs
    assert (back.required_envs, back.secrets) == (("DATASET", "HF_TOKEN"), ("HF_TOKEN",))
    assert back.file_mounts == spec.file_mounts
    assert back.bucket_mounts["/out"] == spec.bucket_mounts["/out"]
    assert back.bucket_mounts[taskfile.CHECKPOINT_DIR].source == "s3://bucket/ckpt"
    assert back.envs["SRIFTY_CHECKPOINT_INTERVAL_S"] == "1800"
    res = back.resources
    assert (back.num_nodes, res.instance_type, res.accelerators, res.use_spot) == (
        2,
        "p4d.24xlarge",
        (("A100", 8),),
        True,
    )
    assert (res.region, res.zone) == ("us-east-1", "us-east-1c")
    assert taskfile.plan_conflicts(back, spot) == []


# ------------------------------------------------------------------------------------ the API
def test_the_plans_api_offers_each_option_as_a_skypilot_file(user):
    mixed = option(group("p4d.24xlarge", count=2), group("g5.xlarge", count=1, gpus=1, batch=32), rank=2)
    plan = PlanRecord.objects.create(
        owner=user, request={}, status="solved", result={"plans": [option(), mixed]}
    )
    client = APIClient()
    client.force_authenticate(user)
    url = f"/api/v1/plans/{plan.pk}/options/{{}}/skypilot/"
    one = client.get(url.format(1))
    assert one.status_code == 200 and one["Content-Type"] == "application/yaml"
    assert (
        one["Content-Disposition"] == f'attachment; filename="plan-{plan.pk}-srifty-plan-option-1.sky.yaml"'
    )
    doc = yaml.safe_load(one.content)
    assert doc["num_nodes"] == 2 and doc["run"].startswith(taskfile.SKY_PREAMBLE_MARK)
    assert one.content == client.get("/api/v1/jobs/sky-export/", {"plan": plan.pk, "rank": 1}).content
    both = client.get(url.format(2))
    assert both["Content-Type"] == "application/zip"
    assert len(zipfile.ZipFile(io.BytesIO(both.content)).namelist()) == 3
    assert client.get(url.format(9)).json() == {"rank": ["the plan has no option 9"]}
    stranger = APIClient()
    stranger.force_authenticate(type(user).objects.create_user("mallory", password="x"))
    assert stranger.get(url.format(1)).status_code == 404  # another team's plan is not there
    assert APIClient().get(url.format(1)).status_code in (401, 403)
    queued = PlanRecord.objects.create(owner=user, request={}, status="queued")
    assert client.get(f"/api/v1/plans/{queued.pk}/options/1/skypilot/").json() == {
        "plan": ["the plan is queued, not solved"]
    }


def test_a_plan_made_from_a_task_file_exports_that_task(user):
    task = EXAMPLE.read_text()
    spot = option(group(market="spot"))
    plan = PlanRecord.objects.create(
        owner=user, request={"task": task}, status="solved", result={"plans": [spot]}
    )
    client = APIClient()
    client.force_authenticate(user)
    got = client.get(f"/api/v1/plans/{plan.pk}/options/1/skypilot/")
    assert got["Content-Disposition"] == f'attachment; filename="plan-{plan.pk}-resnet50-imagenet.sky.yaml"'
    doc = yaml.safe_load(got.content)
    assert (
        doc["run"].endswith(taskfile.parse_task(task).run) and doc["envs"]["DATA_DIR"] == "/opt/data/imagenet"
    )
    minutes, _ = spot_policy.option_interval_min(spot["groups"], None, None)
    assert doc["envs"]["SRIFTY_CHECKPOINT_INTERVAL_S"] == str(round(minutes * 60))


# ------------------------------------------------------------------- SkyPilot's own reader
# A task in SkyPilot's words with most of what Srifty reads of its resources (issue 37 item 1).
FEATURES = """\
resources:
  infra: aws/us-east-2
  cpus: 32+
  memory: 256+
  disk_size: 512
  disk_tier: best
  network_tier: best
  ports: [8888]
  labels: {team: vision}
  any_of:
    - {accelerators: A100:8}
    - {accelerators: H100:8, use_spot: true}
file_mounts:
  /checkpoints: {name: my-ckpts, store: s3, mode: MOUNT_CACHED}
  /code: ./src
secrets: {WANDB_API_KEY: null}
run: python train.py
"""
LAUNCH_ENVS = {"DATASET": "s3://bucket/dataset", "HF_TOKEN": "hf_x"}  # sky launch --env NAME=...
LAUNCH_SECRETS = {"WANDB_API_KEY": "wandb_x"}  # sky launch --secret NAME=...


def _exports(folder: Path) -> dict[str, str]:
    """Every kind of export: the template, a mix, the example task, a SkyPilot task with git
    workdir, launch-time envs, secrets, buckets and a pinned zone, and one in a Docker image."""
    region = "us-east-1"
    g5 = {
        **group("g5.xlarge", count=1, gpus=1, batch=32, market="spot", zone="use1-az2"),
        "gpu_model": "A10G",
    }
    mixed = option(group("p4d.24xlarge", count=2, zone=None), g5, rank=2)
    example = taskfile.parse_task(EXAMPLE.read_text(), EXAMPLE)
    (folder / "examples" / "train").mkdir(parents=True)  # the example's workdir, where sky launch runs
    skypilot_task = taskfile.parse_task(
        "workdir: {url: https://github.com/org/repo.git, ref: v1.2}\n"
        "envs: {EPOCHS: 3, DATASET: null}\nsecrets: {WANDB_API_KEY: null}\n"
        "file_mounts:\n  /data: s3://bucket/data\n  /out: {name: my-out-bucket, mode: MOUNT}\n"
        "checkpoint: {s3: s3://bucket/ckpt, interval: auto}\n"
        "run: |\n  torchrun --nnodes $NNODES train.py\n",
        "llm-ft.yaml",
    )
    pinned = option(group(market="spot", zone="use1-az4"), rank=3)
    files: dict[str, str] = {}
    files.update(taskfile.to_skypilot(option()))
    files.update(taskfile.to_skypilot(mixed))
    files.update(taskfile.to_skypilot(option(rank=4), example))
    names = {"use1-az4": skypilot_venv.zone_name("use1-az4", region)}
    files.update(taskfile.to_skypilot(pinned, skypilot_task, checkpoint_interval_s=600, zone_names=names))
    # (an AMI is checked by SkyPilot against AWS itself, which needs skypilot[aws] and credentials)
    docker = taskfile.parse_task(
        "resources: {image_id: docker:nvcr.io/nvidia/pytorch:24.01-py3}\nrun: x\n", "in-docker.yaml"
    )
    files.update(taskfile.to_skypilot(option(rank=5), docker))
    return files


def _refused() -> dict[str, str]:
    """Exports spoilt the ways SkyPilot refuses: a zone ID where it wants a name, an unknown
    instance type, a launch-time env left unset."""
    [(_, text)] = taskfile.to_skypilot(option())
    doc = yaml.safe_load(text)
    res = doc["resources"]
    return {
        "zone-id.yaml": yaml.safe_dump({**doc, "resources": {**res, "infra": "aws/us-east-1/use1-az1"}}),
        "no-type.yaml": yaml.safe_dump({**doc, "resources": {**res, "instance_type": "p4d.96xlarge"}}),
        "unset.yaml": yaml.safe_dump({**doc, "envs": {**doc["envs"], "LEFT_UNSET": None}}),
    }


@dataclass
class SkyRead:
    folder: Path
    files: dict[str, str]
    read: dict[str, dict]


@pytest.fixture(scope="module")
def sky_read(tmp_path_factory) -> SkyRead:
    """One run of SkyPilot's reader (tens of seconds) over every file the tests below look at."""
    skypilot_venv.skypilot_python()  # skips here, with the reason, when there is no venv
    folder = tmp_path_factory.mktemp("sky")
    (folder / "src").mkdir()
    files = {
        **_exports(folder),
        **_refused(),
        "task-distributed.yaml": DISTRIBUTED.replace("~/.netrc: ~/.netrc", "/code: ./src"),
        "task-features.yaml": FEATURES,
    }
    return SkyRead(
        folder, files, skypilot_venv.read_with_skypilot(files, folder, LAUNCH_ENVS, LAUNCH_SECRETS)
    )


@pytest.mark.skypilot
def test_every_export_is_read_by_skypilot_itself_as_it_was_meant(sky_read):
    exports = {n: t for n, t in sky_read.files.items() if n.endswith(".sky.yaml")}
    assert len(exports) == 6
    for name, text in exports.items():
        got, doc = sky_read.read[name], yaml.safe_load(text)
        assert "error" not in got, f"{name}: {got.get('error')}"
        assert got["version"] == skypilot_venv.VERSION
        assert (got["name"], got["num_nodes"], got["run"]) == (doc["name"], doc["num_nodes"], doc["run"])
        workdir = doc.get("workdir")  # a folder is made absolute (relative to where sky launch runs)
        workdir = str((sky_read.folder / workdir).resolve()) if isinstance(workdir, str) else workdir
        assert (got["setup"], got["workdir"]) == (doc.get("setup"), workdir)
        envs = {k: v for k, v in doc["envs"].items() if v is not None}
        assert {k: got["envs"][k] for k in envs} == envs
        [res] = got["resources"]
        want = doc["resources"]
        assert (res["cloud"], res["instance_type"], res["use_spot"]) == (
            "AWS",
            want["instance_type"],
            want["use_spot"],
        )
        gpu, count = want["accelerators"].split(":")
        assert res["accelerators"] == res["catalog_accelerators"] == {gpu: int(count)}
        assert res["region"] == want["infra"].split("/")[1] and res["region"] in res["catalog_zones"]
        zone = want["infra"].split("/")[2] if want["infra"].count("/") == 2 else None
        assert res["zone"] == zone and (zone is None or zone in res["catalog_zones"][res["region"]])
        buckets = {p: m for p, m in doc.get("file_mounts", {}).items() if isinstance(m, dict)}
        assert sorted(got["storage_mounts"]) == sorted(buckets)
    docker = sky_read.read["in-docker.sky.yaml"]["resources"][0]["image_id"]
    assert docker == {"us-east-1": "docker:nvcr.io/nvidia/pytorch:24.01-py3"}
    pinned = sky_read.read["llm-ft.sky.yaml"]
    assert pinned["resources"][0]["zone"] == skypilot_venv.zone_name("use1-az4", "us-east-1")
    assert pinned["workdir"] == {"url": "https://github.com/org/repo.git", "ref": "v1.2"}
    assert pinned["secrets"] == ["WANDB_API_KEY"] and pinned["envs"]["DATASET"] == LAUNCH_ENVS["DATASET"]
    assert pinned["envs"]["SRIFTY_CHECKPOINT_INTERVAL_S"] == "600"
    assert pinned["storage_mounts"][taskfile.CHECKPOINT_DIR] == {
        "source": "s3://bucket/ckpt",
        "mode": "MOUNT_CACHED",
    }
    assert pinned["file_mounts"] == {"/data": "s3://bucket/data"}


@pytest.mark.skypilot
def test_skypilots_reader_refuses_what_skypilot_refuses(sky_read):
    """The check above can fail."""
    assert "Invalid zone 'use1-az1'" in sky_read.read["zone-id.yaml"]["error"]
    assert "Invalid instance type 'p4d.96xlarge'" in sky_read.read["no-type.yaml"]["error"]
    assert "Environment variable 'LEFT_UNSET' is None" in sky_read.read["unset.yaml"]["error"]


@pytest.mark.skypilot
@pytest.mark.parametrize("name", ["task-distributed.yaml", "task-features.yaml"])
def test_a_task_in_skypilots_words_means_to_srifty_what_it_means_to_skypilot(sky_read, name):
    text = sky_read.files[name]
    got, ours = sky_read.read[name], taskfile.parse_task(text, name)
    assert "error" not in got, got.get("error")
    assert (got["num_nodes"], got["setup"], got["run"]) == (ours.num_nodes or 1, ours.setup or None, ours.run)
    assert {k: got["envs"][k] for k in ours.envs} == ours.envs
    assert set(ours.required_envs) - set(ours.secrets) <= set(got["envs"]) and got["secrets"] == sorted(
        ours.secrets
    )
    assert got["file_mounts"] == {
        p: str((sky_read.folder / s).resolve()) for p, s in ours.file_mounts.items()
    }
    assert {p: m["mode"] for p, m in got["storage_mounts"].items()} == {
        p: b.mode for p, b in ours.bucket_mounts.items()
    }
    theirs = sorted(
        (tuple(r["accelerators"].items()), bool(r["use_spot"]), r["region"] or "") for r in got["resources"]
    )
    mine = sorted((c.accelerators, bool(c.use_spot), c.region) for c in ours.resources.choices)
    assert theirs == mine
    by_gpus = {tuple(r["accelerators"].items()): r for r in got["resources"]}  # SkyPilot's is a set
    for c in ours.resources.choices:
        r = by_gpus[c.accelerators]
        assert (r["cpus"], r["memory"], r["disk_size"]) == (
            str(c.cpus) if c.cpus else None,
            str(c.memory) if c.memory else None,
            c.disk_size or r["disk_size"],  # SkyPilot's default disk when the file names none
        )
        assert (r["disk_tier"], r["network_tier"], r["labels"]) == (
            c.disk_tier or None,
            c.network_tier or None,
            c.labels or None,
        )
        assert [str(p) for p in r["ports"] or []] == list(c.ports)
