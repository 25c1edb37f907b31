"""Task files in Srifty's dialect and SkyPilot's, their errors, node env and SkyPilot export."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from launcher.taskfile import TaskFileError, check_workdir, node_env, parse_task, plan_conflicts, to_skypilot

ROOT = Path(__file__).resolve().parents[2]

OPTION = {
    "rank": 1,
    "region": "us-east-1",
    "global_batch": 512,
    "groups": [
        {"instance_type": "p4d.24xlarge", "market": "spot", "zone": "use1-az1", "count": 2, "gpus_per_node": 8,
         "gpu_model": "A100", "batch_per_node": [192, 192]},
        {"instance_type": "g5.12xlarge", "market": "on-demand", "zone": None, "count": 1, "gpus_per_node": 4,
         "gpu_model": "A10G", "batch_per_node": [128]},
    ],
}  # fmt: skip

SKY = """\
name: my-train
workdir: ~/code
num_nodes: 3
resources:
  accelerators: A100:8
  use_spot: true
  region: us-east-1
  image_id: ami-0123456789abcdef0
envs:
  LR: 0.1
  WANDB: false
file_mounts:
  /data: s3://bucket/imagenet
setup: pip install -r requirements.txt
run: |
  torchrun --nnodes $SKYPILOT_NUM_NODES train.py
"""


def _issues(text: str | bytes, *, for_launch: bool = False) -> list[tuple[int | None, str]]:
    with pytest.raises(TaskFileError) as exc:
        parse_task(text, for_launch=for_launch)
    return [(i.line, i.field) for i in exc.value.issues]


def test_it_reads_the_example_task():
    spec = parse_task((ROOT / "examples" / "task.yaml").read_text())
    assert spec.name == "resnet50-imagenet" and spec.dialect == "srifty"
    assert spec.workdir.kind == "local" and spec.workdir.path == "./examples/train"
    assert spec.checkpoint.auto and spec.checkpoint.s3_prefix == "s3://my-team-checkpoints/resnet50"
    assert spec.envs == {"DATA_DIR": "/opt/data/imagenet", "EPOCHS": "90"}
    assert check_workdir(spec, ROOT) == ROOT / "examples" / "train"


def test_it_reads_a_skypilot_task_unchanged():
    spec = parse_task(SKY)
    assert spec.dialect == "skypilot" and spec.num_nodes == 3
    assert (spec.resources.accelerator, spec.resources.accelerator_count) == ("A100", 8)
    assert spec.resources.use_spot is True and spec.image_id == "ami-0123456789abcdef0"
    assert spec.envs == {"LR": "0.1", "WANDB": "false"}
    assert spec.file_mounts == {"/data": "s3://bucket/imagenet"}


def test_it_reads_git_workdirs_and_intervals():
    spec = parse_task("name: a\nrun: x\nworkdir: git:https://github.com/org/repo.git@v1.2\n"
                      "checkpoint: {s3: s3://bkt/p, interval: 2h}\n")  # fmt: skip
    assert (spec.workdir.kind, spec.workdir.url, spec.workdir.ref) == (
        "git",
        "https://github.com/org/repo.git",
        "v1.2",
    )
    assert spec.checkpoint.interval_min == 120.0
    assert (
        parse_task("name: a\nrun: x\ncheckpoint: {s3: s3://bkt/p, interval: 45}\n").checkpoint.interval_min
        == 45.0
    )
    assert (
        parse_task("name: a\nrun: x\nresources: {accelerators: {H100: 8}}\n").resources.accelerator_count == 8
    )


def test_it_reports_every_error_with_its_line_and_field():
    text = """\
name: Bad Name
setup: 3
envs:
  NODE_RANK: 2
  9LIVES: x
checkpoint:
  s3: bucket/no-scheme
  interval: soon
resources:
  accelerators: [A100, 8]
  gpus: 8
colour: blue
"""
    assert set(_issues(text, for_launch=True)) == {
        (1, "name"),
        (None, "run"),
        (4, "envs.NODE_RANK"),
        (5, "envs.9LIVES"),
        (7, "checkpoint.s3"),
        (8, "checkpoint.interval"),
        (10, "resources.accelerators"),
        (11, "resources.gpus"),
        (12, "colour"),
    }


def test_it_rejects_what_is_not_a_task():
    assert _issues("run: [unclosed\n")[0][1] == "file"
    assert _issues("- a list\n") == [(1, "file")]
    assert _issues(b"\xff\xfe") == [(None, "file")]
    assert _issues("name: a\nrun: '  '\n", for_launch=True) == [(2, "run")]
    assert _issues("name: a\nrun: x\nnum_nodes: 0\n") == [(3, "num_nodes")]
    assert _issues("name: a\nrun: x\nresources: {image_id: ubuntu}\n") == [(3, "resources.image_id")]
    with pytest.raises(TaskFileError, match="larger than"):
        parse_task("name: a\nrun: " + "x" * 300_000)


def test_a_missing_local_workdir_is_an_error(tmp_path):
    spec = parse_task("name: a\nrun: x\nworkdir: ./nowhere\n")
    with pytest.raises(TaskFileError, match="workdir"):
        check_workdir(spec, tmp_path)


def test_every_node_gets_torchrun_and_skypilot_variables_with_its_batch():
    spec = parse_task(SKY)
    ips = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    first, last = node_env(spec, OPTION, 0, ips), node_env(spec, OPTION, 2, ips)
    assert first["MASTER_ADDR"] == last["MASTER_ADDR"] == "10.0.0.1"
    assert (first["NODE_RANK"], first["NNODES"], first["NPROC_PER_NODE"]) == ("0", "3", "8")
    assert (last["NODE_RANK"], last["NPROC_PER_NODE"], last["SRIFTY_BATCH_PER_NODE"]) == ("2", "4", "128")
    assert first["SRIFTY_BATCH_PER_NODE"] == "192" and first["SRIFTY_GLOBAL_BATCH"] == "512"
    assert last["SKYPILOT_NODE_IPS"].splitlines() == ips and last["SKYPILOT_NUM_GPUS_PER_NODE"] == "4"
    assert first["LR"] == "0.1"
    with pytest.raises(ValueError):
        node_env(spec, OPTION, 3, ips)


def test_it_names_where_a_skypilot_request_disagrees_with_the_plan():
    notes = plan_conflicts(parse_task(SKY), OPTION)
    assert any("spot" in n for n in notes)  # the plan's g5 group is on-demand
    single = {**OPTION, "groups": OPTION["groups"][:1]}
    assert plan_conflicts(parse_task(SKY.replace("num_nodes: 3", "num_nodes: 2")), single) == []


def test_a_plan_option_exports_as_skypilot_files_one_per_type():
    files = to_skypilot(OPTION, parse_task((ROOT / "examples" / "task.yaml").read_text()))
    assert [name for name, _ in files] == [
        "resnet50-imagenet-p4d-24xlarge.sky.yaml",
        "resnet50-imagenet-g5-12xlarge.sky.yaml",
    ]
    assert "mixes 2 instance types" in files[0][1]
    p4d = yaml.safe_load(files[0][1])
    assert p4d["num_nodes"] == 2 and p4d["resources"]["use_spot"] is True
    assert p4d["resources"]["accelerators"] == "A100:8" and p4d["envs"]["SRIFTY_BATCH_PER_NODE"] == "192"
    # The export reads back through the SkyPilot dialect.
    again = parse_task(files[1][1])
    assert again.dialect == "skypilot" and again.num_nodes == 1 and again.resources.use_spot is False


def test_a_single_type_plan_exports_one_runnable_file_without_a_task():
    [(name, text)] = to_skypilot({**OPTION, "groups": OPTION["groups"][:1]})
    doc = yaml.safe_load(text)
    assert name == "srifty-plan-option-1.sky.yaml" and "torchrun" in doc["run"] and "NOTE" not in text


def test_redaction_hides_credential_values_everywhere_and_leaves_the_rest():
    from launcher.taskfile import redacted

    text = (
        "name: t\nrun: python train.py --token $HF_TOKEN --db abcd1234xyz\n"
        "envs:\n  HF_TOKEN: abcd1234\n  DB_PASSWORD: abcd1234xyz\n  PIN_KEY: 12\n  EPOCHS: '90'\n"
    )
    out = redacted(text)
    assert "abcd1234" not in out  # the longer value first: no half-shown 'xyz' tail
    assert out.count("<redacted>") == 3 and "--db <redacted>" in out
    assert "PIN_KEY: 12" in out and "EPOCHS: '90'" in out  # too short to be a secret; not a credential
    assert redacted("") == "" and redacted("not: [valid") == "not: [valid"
