"""SkyPilot 0.14's task-file dialect as SkyPilot means it (issue 37 item 1): every feature in a task
written here in our own words, its parsed meaning; other clouds refused with the AWS-only
message; what is read but not acted on kept and warned about with its line."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from launcher.taskfile import (
    Amount,
    BucketMount,
    TaskFileError,
    name_from_filename,
    node_env,
    parse_task,
    plan_conflicts,
    redacted,
    to_skypilot,
)

RUN = "run: python train.py\n"

OPTION = {
    "rank": 1,
    "region": "us-east-2",
    "global_batch": 256,
    "groups": [
        {"instance_type": "p5.48xlarge", "market": "spot", "zone": "use2-az1", "count": 2, "gpus_per_node": 8,
         "gpu_model": "H100", "batch_per_node": [128, 128]},
    ],
}  # fmt: skip


def _refusal(text: str) -> list[tuple[int | None, str, str]]:
    with pytest.raises(TaskFileError) as exc:
        parse_task(text)
    return [(i.line, i.field, i.message) for i in exc.value.issues]


def _warned(text: str) -> dict[str, int | None]:
    return {w.field: w.line for w in parse_task(text).warnings}


# ------------------------------------------------------------------------------------- name
def test_a_file_without_a_name_is_named_after_its_stem_or_task():
    assert parse_task(RUN).name == "task"
    assert parse_task(RUN, filename="/tmp/Fine Tune.LLaMA.sky.yaml").name == "fine-tune-llama"
    assert parse_task(RUN, filename="___.yml").name == "task"
    assert name_from_filename("minGPT_ddp.yaml") == "mingpt_ddp"


def test_a_skypilot_name_with_capitals_is_read_lower_cased_with_a_warning():
    spec = parse_task("name: minGPT-ddp.v2\n" + RUN)
    assert spec.name == "mingpt-ddp-v2"
    assert [(w.line, w.field) for w in spec.warnings] == [(1, "name")]
    assert _refusal("name: two words\n" + RUN)[0][:2] == (1, "name")  # not a name in either dialect


# ---------------------------------------------------------------------------- accelerators
@pytest.mark.parametrize(
    "written",
    [
        "{A100: 8, H100: 8}",  # a map: any of them
        "[A100:8, H100:8]",  # a list
        "{A100:8, H100:8}",  # a set (YAML reads it as a map to nulls)
    ],
)
def test_accelerator_alternatives_are_read_in_the_files_order(written):
    res = parse_task(f"resources:\n  accelerators: {written}\n{RUN}").resources
    assert res.accelerators == (("A100", 8), ("H100", 8))
    assert (res.accelerator, res.accelerator_count) == ("A100", 8)  # the first, for older callers


def test_one_accelerator_without_a_count_means_one():
    assert parse_task("resources: {accelerators: L4}\n" + RUN).resources.accelerators == (("L4", 1),)


def test_an_accelerator_count_that_is_not_a_whole_positive_number_is_an_error():
    assert _refusal("resources:\n  accelerators: {A100: two}\n" + RUN)[0][:2] == (2, "resources.accelerators")
    assert _refusal("resources:\n  accelerators: [A100:0]\n" + RUN)[0][:2] == (2, "resources.accelerators")


def test_any_of_entries_are_alternatives_over_the_blocks_other_keys():
    spec = parse_task(
        "resources:\n"
        "  use_spot: true\n"
        "  cpus: 32+\n"
        "  any_of:\n"
        "    - {accelerators: H100:8, infra: aws/us-east-2}\n"
        "    - {accelerators: A100:8, region: us-west-2, use_spot: false}\n" + RUN
    )
    first, second = spec.resources.choices
    assert (first.accelerators, first.region, first.use_spot, first.cpus) == (
        (("H100", 8),),
        "us-east-2",
        True,
        Amount(32.0, True),
    )
    assert (second.accelerators, second.region, second.use_spot) == ((("A100", 8),), "us-west-2", False)
    assert spec.resources.ordered is False and spec.resources.accelerator == "H100"


def test_ordered_entries_are_read_as_alternatives_and_the_order_is_warned_about():
    text = "resources:\n  ordered:\n    - {accelerators: H100:8}\n    - {accelerators: A100:8}\n" + RUN
    spec = parse_task(text)
    assert spec.resources.ordered and [c.accelerator for c in spec.resources.choices] == ["H100", "A100"]
    assert _warned(text) == {"resources.ordered": 2}


def test_an_any_of_entry_on_another_cloud_is_left_out_with_a_warning():
    text = "resources:\n  any_of:\n    - {infra: gcp, accelerators: A100:8}\n    - {infra: aws, accelerators: A100:8}\n"
    spec = parse_task(text + RUN)
    assert len(spec.resources.choices) == 1 and spec.resources.accelerator == "A100"
    [warning] = spec.warnings
    assert warning.line == 2 and "entry 1 is not on AWS" in warning.message and "gcp" in warning.message


# -------------------------------------------------------------------------- where (AWS only)
@pytest.mark.parametrize(
    ("written", "region", "zone"),
    [
        ("infra: aws", "", ""),
        ("infra: aws/us-east-2", "us-east-2", ""),
        ("infra: aws/us-east-2/us-east-2a", "us-east-2", "us-east-2a"),
        ("cloud: aws", "", ""),
        ("{cloud: AWS, region: eu-west-1}", "eu-west-1", ""),
        ("{zone: us-west-2b}", "us-west-2", "us-west-2b"),
    ],
)
def test_infra_and_cloud_naming_aws_give_the_region_and_zone(written, region, zone):
    block = written if written.startswith("{") else "{" + written + "}"
    res = parse_task(f"resources: {block}\n{RUN}").resources
    assert (res.region, res.zone) == (region, zone)


@pytest.mark.parametrize(
    ("resources", "named"),
    [
        ("{infra: gcp/us-central1}", "resources.infra: gcp/us-central1 (line 3)"),
        ("{infra: k8s}", "resources.infra: k8s (line 3)"),
        ("{infra: kubernetes/my-context}", "resources.infra: kubernetes/my-context (line 3)"),
        ("{cloud: azure, accelerators: A100:8}", "resources.cloud: azure (line 3)"),
        ("{cloud: lambda}", "resources.cloud: lambda (line 3)"),
        ("{infra: runpod}", "resources.infra: runpod (line 3)"),
        ("{accelerators: tpu-v4-8}", "resources.accelerators: tpu-v4-8 (a Google TPU) (line 3)"),
    ],
)
def test_a_file_that_pins_another_cloud_gets_one_aws_only_message(resources, named):
    text = (
        f"name: Bad Name\nnum_nodes: 0\nresources: {resources}\n{RUN}"  # its other errors are not the point
    )
    [(line, field, message)] = _refusal(text)
    assert message == f"Srifty plans and launches on AWS only: {named}"
    assert (line, field) == (3, named.split(":")[0])


def test_a_bucket_of_another_cloud_is_pinned_too():
    [(_, _, gcs)] = _refusal("file_mounts:\n  /data: gs://my-bucket/x\n" + RUN)
    [(_, _, store)] = _refusal("file_mounts:\n  /out:\n    name: b\n    store: gcs\n" + RUN)
    assert gcs == "Srifty plans and launches on AWS only: file_mounts./data: gs://my-bucket/x (gcp) (line 2)"
    assert store.startswith("Srifty plans and launches on AWS only: file_mounts./out: store gcs (line 2)")


def test_infra_and_cloud_together_or_a_zone_outside_its_region_are_errors():
    assert _refusal("resources: {infra: aws, region: us-east-1}\n" + RUN)[0][1] == "resources.infra"
    assert _refusal("resources: {region: us-east-1, zone: us-west-2a}\n" + RUN)[0][1] == "resources.zone"


# ------------------------------------------------------------------------- other resources
def test_cpus_and_memory_are_kept_as_minimums_exact_or_or_more():
    res = parse_task("resources: {cpus: 8, memory: 64+}\n" + RUN).resources
    assert res.cpus == Amount(8.0, False) and res.memory == Amount(64.0, True)
    assert res.memory.minimum == 64.0 and str(res.memory) == "64+"
    assert parse_task("resources: {memory: 1TB+}\n" + RUN).resources.memory == Amount(1024.0, True)
    assert _refusal("resources: {cpus: lots}\n" + RUN)[0][:2] == (1, "resources.cpus")


def test_disks_ports_network_labels_and_recovery_are_read():
    spec = parse_task(
        "resources:\n"
        "  disk_size: 512\n"
        "  disk_tier: best\n"
        "  ports: [8888, 10000-10010]\n"
        "  network_tier: best\n"
        "  labels: {team: vision, cost-centre: 42}\n"
        "  job_recovery: {strategy: EAGER_NEXT_REGION, max_restarts_on_errors: 3}\n" + RUN
    )
    res = spec.resources
    assert (res.disk_size, res.disk_tier, res.ports) == (512, "best", ("8888", "10000-10010"))
    assert res.network_tier == "best" and res.efa
    assert res.labels == {"team": "vision", "cost-centre": "42"}
    assert res.job_recovery == {"strategy": "EAGER_NEXT_REGION", "max_restarts_on_errors": 3}
    assert parse_task("resources: {ports: 8080}\n" + RUN).resources.ports == ("8080",)


def test_resources_values_out_of_range_are_errors_with_their_line():
    text = "resources:\n  disk_tier: fastest\n  ports: 70000\n  network_tier: ludicrous\n  disk_size: 10+\n"
    fields = {(line, field) for line, field, _ in _refusal(text + RUN)}
    assert fields == {
        (2, "resources.disk_tier"),
        (3, "resources.ports"),
        (4, "resources.network_tier"),
        (5, "resources.disk_size"),
    }


def test_image_id_is_an_ami_a_map_of_regions_or_a_docker_image():
    res = parse_task(
        "resources:\n  image_id:\n    us-east-1: ami-0123456789abcdef0\n    us-west-2: ami-0fedcba9876543210\n"
        + RUN
    ).resources
    assert res.image_ids == {"us-east-1": "ami-0123456789abcdef0", "us-west-2": "ami-0fedcba9876543210"}
    assert res.image_for("us-west-2") == "ami-0fedcba9876543210" and res.image_for("eu-west-1") == ""
    docker = parse_task("resources: {image_id: 'docker:nvcr.io/nvidia/pytorch:24.05-py3'}\n" + RUN)
    assert docker.resources.docker_image == "nvcr.io/nvidia/pytorch:24.05-py3" and docker.image_id == ""
    assert [w.field for w in docker.warnings] == ["resources.image_id"]
    [(_, _, message)] = _refusal("resources:\n  image_id: {us-east-1: ubuntu}\n" + RUN)
    assert "per region an AMI id" in message


# --------------------------------------------------------------- file mounts, envs, secrets
def test_bucket_mounts_are_read_with_their_mode():
    spec = parse_task(
        "file_mounts:\n"
        "  /data: s3://open-images/train\n"
        "  /checkpoints:\n"
        "    name: my-ckpts\n"
        "    store: s3\n"
        "    mode: mount_cached\n"
        "  /inputs:\n"
        "    source: [./a, ./b]\n"
        "    mode: COPY\n" + RUN
    )
    assert spec.file_mounts == {"/data": "s3://open-images/train"}
    assert spec.bucket_mounts == {
        "/checkpoints": BucketMount("/checkpoints", name="my-ckpts", store="s3", mode="MOUNT_CACHED"),
        "/inputs": BucketMount("/inputs", source=("./a", "./b"), mode="COPY"),
    }
    assert _refusal("file_mounts:\n  /x: {name: b, mode: STREAM}\n" + RUN)[0][:2] == (2, "file_mounts./x")


def test_an_env_written_null_must_be_given_at_launch_and_is_not_an_empty_string():
    spec = parse_task("envs:\n  HF_TOKEN: null\n  EPOCHS: 3\n  WANDB_PROJECT:\n" + RUN)
    assert spec.envs == {"EPOCHS": "3"} and spec.required_envs == ("HF_TOKEN", "WANDB_PROJECT")


def test_secrets_are_never_among_the_envs_and_are_redacted_wherever_shown():
    text = "envs: {EPOCHS: 3}\nsecrets:\n  WANDB: wandb-abcdef123\n  HF_TOKEN: null\n" + RUN
    spec = parse_task(text)
    assert spec.envs == {"EPOCHS": "3"} and spec.secrets == ("WANDB", "HF_TOKEN")
    assert spec.required_envs == ("HF_TOKEN",) and spec.dialect == "skypilot"
    assert "wandb-abcdef123" not in repr(spec) and "wandb-abcdef123" not in redacted(text)
    env = node_env(spec, OPTION, 0, ["10.0.0.1", "10.0.0.2"])
    assert env["WANDB"] == "wandb-abcdef123" and "HF_TOKEN" not in env


def test_a_name_both_in_envs_and_secrets_or_reserved_is_an_error():
    fields = {f for _, f, _ in _refusal("envs: {A: 1}\nsecrets: {A: null, NODE_RANK: x}\n" + RUN)}
    assert fields == {"secrets.A", "secrets.NODE_RANK"}


def test_the_export_keeps_launch_time_envs_secret_names_and_buckets_but_no_secret_value():
    spec = parse_task(
        "envs: {HF_HOME: /cache, DATASET: null}\nsecrets: {HF_TOKEN: hf_abcdefgh}\n"
        "file_mounts:\n  /ckpt: {name: my-ckpts, mode: MOUNT}\n" + RUN
    )
    [(_, text)] = to_skypilot(OPTION, spec)
    doc = yaml.safe_load(text)
    assert doc["envs"]["DATASET"] is None and doc["envs"]["HF_HOME"] == "/cache"
    assert doc["secrets"] == {"HF_TOKEN": None} and "hf_abcdefgh" not in text
    assert doc["file_mounts"] == {"/ckpt": {"name": "my-ckpts", "store": "s3", "mode": "MOUNT"}}
    assert parse_task(text).required_envs == ("DATASET", "HF_TOKEN")


# ----------------------------------------------------------------- kept and warned, not dropped
def test_what_srifty_does_not_act_on_is_kept_and_warned_about_by_name_and_line():
    text = (
        "name: train\n"
        "resources:\n"
        "  accelerators: A100:8\n"
        "  cpus: 16+\n"
        "  disk_size: 256\n"
        "  autostop: 10m\n"
        "file_mounts:\n"
        "  /data: s3://bucket/data\n"
        "config:\n"
        "  aws: {use_internal_ips: true}\n"
        "service:\n"
        "  readiness_probe: /health\n" + RUN
    )
    spec = parse_task(text)
    assert _warned(text) == {
        "resources.cpus": 4,
        "resources.disk_size": 5,
        "resources.autostop": 6,
        "file_mounts": 7,
        "config": 9,
        "service": 11,
    }
    assert spec.extras == {
        "config": {"aws": {"use_internal_ips": True}},
        "service": {"readiness_probe": "/health"},
    }
    assert spec.resources.extras == {"autostop": "10m"}


def test_a_key_skypilot_does_not_know_is_still_an_error():
    assert {f for _, f, _ in _refusal("resources: {gpus: 8}\ncolour: blue\n" + RUN)} == {
        "resources.gpus",
        "colour",
    }


def test_a_workdir_mapping_is_a_git_repository_at_a_ref():
    spec = parse_task("workdir:\n  url: https://github.com/org/repo.git\n  ref: v2\n" + RUN)
    assert (spec.workdir.kind, spec.workdir.url, spec.workdir.ref) == (
        "git",
        "https://github.com/org/repo.git",
        "v2",
    )


# ------------------------------------------------------------------------------ the plan's view
def test_the_plan_disagrees_only_when_no_alternative_asks_for_what_it_runs():
    both = parse_task(
        "num_nodes: 2\nresources:\n  accelerators: {A100: 8, H100: 8}\n  use_spot: true\n" + RUN
    )
    assert plan_conflicts(both, OPTION) == []
    a100 = parse_task(
        "num_nodes: 2\nresources:\n  any_of: [{accelerators: A100:8}, {accelerators: L40S:8}]\n" + RUN
    )
    assert plan_conflicts(a100, OPTION) == ["the file asks for A100 or L40S; the plan uses H100"]
    west = parse_task("num_nodes: 2\nresources: {infra: aws/us-west-2}\n" + RUN)
    assert plan_conflicts(west, OPTION) == ["the file asks for region us-west-2; the plan is in us-east-2"]


# ------------------------------------------------------------ a whole task in SkyPilot's words
# The shape of SkyPilot's own distributed-training examples: no name, SkyPilot's node names in
# run, a launch-time token, setup and run as blocks.
DISTRIBUTED = """\
resources:
  accelerators: H100:8
  use_spot: true
  job_recovery: EAGER_NEXT_REGION

num_nodes: 2

envs:
  HF_TOKEN: null
  EPOCHS: 3

file_mounts:
  ~/.netrc: ~/.netrc

setup: |
  pip install -r requirements.txt

run: |
  MASTER_ADDR=$(echo "$SKYPILOT_NODE_IPS" | head -n1)
  torchrun --nnodes=$SKYPILOT_NUM_NODES --nproc_per_node=$SKYPILOT_NUM_GPUS_PER_NODE \\
    --node_rank=$SKYPILOT_NODE_RANK --master_addr=$MASTER_ADDR --master_port=8008 train.py
"""


def test_a_distributed_skypilot_task_is_read_as_skypilot_means_it():
    spec = parse_task(DISTRIBUTED, "minGPT_ddp.yaml")
    assert (spec.name, spec.dialect, spec.num_nodes) == ("mingpt_ddp", "skypilot", 2)
    res = spec.resources
    assert (res.accelerators, res.use_spot, res.job_recovery) == ((("H100", 8),), True, "EAGER_NEXT_REGION")
    assert spec.envs == {"EPOCHS": "3"} and spec.required_envs == ("HF_TOKEN",)
    assert spec.file_mounts == {"~/.netrc": "~/.netrc"}
    assert spec.setup == "pip install -r requirements.txt\n"
    assert spec.run.startswith('MASTER_ADDR=$(echo "$SKYPILOT_NODE_IPS" | head -n1)\n')
    assert {w.field for w in spec.warnings} == {"resources.job_recovery", "file_mounts"}
    assert plan_conflicts(spec, OPTION) == []  # 2 x p5.48xlarge (H100:8) on spot


def test_a_skypilot_task_launched_by_srifty_gets_skypilots_names_in_real_bash(tmp_path):
    spec = parse_task(DISTRIBUTED, "minGPT_ddp.yaml")
    fake = tmp_path / "torchrun"
    fake.write_text('#!/bin/bash\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    fake.chmod(0o755)
    env = {**node_env(spec, OPTION, 1, ["10.0.0.1", "10.0.0.2"]), "PATH": f"{tmp_path}:/usr/bin:/bin"}
    argv = subprocess.run(
        ["bash", "-c", spec.run], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert argv == [
        "--nnodes=2",
        "--nproc_per_node=8",
        "--node_rank=1",
        "--master_addr=10.0.0.1",
        "--master_port=8008",
        "train.py",
    ]


def test_the_older_spot_recovery_is_job_recovery_and_local_file_mounts_are_kept():
    spec = parse_task(
        "resources: {use_spot: true, spot_recovery: FAILOVER}\nfile_mounts: {/code: ./src}\n" + RUN
    )
    assert spec.resources.job_recovery == "FAILOVER" and spec.file_mounts == {"/code": "./src"}
    assert [w.field for w in spec.warnings] == ["resources.spot_recovery", "file_mounts"]


def test_what_an_export_writes_in_skypilots_words_reads_back_to_the_same_task():
    spec = parse_task(DISTRIBUTED, "minGPT_ddp.yaml")
    [(_, text)] = to_skypilot(OPTION, spec)
    back = parse_task(text)
    assert (back.name, back.num_nodes, back.setup, back.file_mounts) == (
        spec.name,
        2,
        spec.setup,
        spec.file_mounts,
    )
    assert back.run.endswith(spec.run) and back.required_envs == spec.required_envs
    assert (back.resources.instance_type, back.resources.accelerators) == ("p5.48xlarge", (("H100", 8),))
    assert back.resources.use_spot is True and back.resources.region == "us-east-2"
