"""A task-file launch on moto (issue 23 items 1-3 and 7): the RunInstances calls (EFA
interfaces per network card, the placement group, the members-only security group, the AMI id
from the DLAMI SSM parameter), the user-data that fetches the workdir and runs setup and run,
the node environment from the rendezvous, a launch that fails half-way taking down what it
started, task-file errors refused before anything exists, a replacement node, and
``manage.py launch``.

AWS is moto plus ``fake_aws.LaunchAws`` at the botocore boundary (placement groups, the public
SSM parameters and EC2's quotas, which moto lacks).
"""

from __future__ import annotations

import base64
import io
import shlex
import subprocess
import tarfile
from decimal import Decimal
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from launcher import jobs, launch
from launcher.models import Job, JobStatus
from planner.app.models import PlanRecord
from tests.launcher.fake_aws import DLAMI_ARM, DLAMI_X86, REGION, LaunchAws

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]
AMI = "ami-0dlami0000000x86"
TASK = """\
name: bert-pretrain
workdir: git:https://github.com/example/bert.git@v1.2
setup: pip install -r requirements.txt
run: |
  torchrun --nnodes "$NNODES" --nproc-per-node "$NPROC_PER_NODE" --node-rank "$NODE_RANK" \\
    --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" train.py --batch "$SRIFTY_BATCH_PER_NODE"
envs:
  DATA: s3://bucket/wiki
"""


def group(instance_type="p4d.24xlarge", count=2, market="on-demand", gpus=8, batch=256, zone="use1-az1"):
    return {
        "instance_type": instance_type,
        "market": market,
        "zone": zone,
        "count": count,
        "gpus_per_node": gpus,
        "gpu_model": "A100",
        "price_per_hour": 32.77,
        "batch_per_node": [batch] * count,
    }


def option(*groups, rank=1):
    groups = groups or (group(),)
    return {
        "rank": rank,
        "region": REGION,
        "groups": list(groups),
        "global_batch": sum(sum(g["batch_per_node"]) for g in groups),
        "hourly_usd": sum(g["count"] * g["price_per_hour"] for g in groups),
        "time_h": 2.0,
        "time_p90_h": 2.4,
        "iter_time_s": 0.5,
        "iter_time_p90_s": 0.6,
        "throughput_sps": 100.0,
    }


@pytest.fixture
def owner(user):
    user.user_permissions.add(Permission.objects.get(codename="add_job", content_type__app_label="launcher"))
    return type(user).objects.get(pk=user.pk)


@pytest.fixture
def fake(aws, aws_hooks, catalog, settings) -> LaunchAws:
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.immediate.ImmediateBackend"}}
    settings.SITE_URL = "https://srifty.example.com"
    made = LaunchAws(aws)
    made.ssm[DLAMI_X86] = AMI  # the public DLAMI parameter, as AWS publishes it
    made.ssm[DLAMI_ARM] = "ami-0dlami0000000a64"
    aws_hooks.extend(made.handlers())
    return made


def plan_of(owner, *options) -> PlanRecord:
    return PlanRecord.objects.create(
        owner=owner, request={"total_samples": 64_000}, status="solved", result={"plans": list(options)}
    )


def task_job(owner, opt=None, task=TASK, **kw) -> Job:
    opt = opt or option()
    return jobs.create_job(
        owner, plan_of(owner, opt), opt["rank"], "", Decimal("500"), 5.0, confirm=True, task=task, **kw
    )


def user_data(fake: LaunchAws, instance_id: str) -> str:
    attr = fake.moto.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
    return base64.b64decode(attr["UserData"]["Value"]).decode()


def live(fake: LaunchAws, job_id: int) -> list[dict]:
    resp = fake.moto.describe_instances(
        Filters=[
            {"Name": "tag:srifty:job-id", "Values": [str(job_id)]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ]
    )
    return [i for r in resp["Reservations"] for i in r["Instances"]]


def test_an_efa_task_launch_asks_for_efa_interfaces_the_group_the_firewall_and_the_dlami(fake, owner):
    job = task_job(owner)
    assert launch.launch_job(job) == "launched 2 instances"
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and job.image_id == AMI and job.image_source == DLAMI_X86
    [run] = fake.params("RunInstances")
    assert run["ImageId"] == AMI and run["Placement"] == {"GroupName": f"srifty-job-{job.pk}"}
    assert fake.groups == {f"srifty-job-{job.pk}": "cluster"}
    nics = run["NetworkInterfaces"]  # p4d.24xlarge: 4 network cards, EFA on each
    assert [(n["NetworkCardIndex"], n["DeviceIndex"], n["InterfaceType"]) for n in nics] == [
        (0, 0, "efa"),
        (1, 1, "efa"),
        (2, 1, "efa"),
        (3, 1, "efa"),
    ]
    assert {tuple(n["Groups"]) for n in nics} == {(job.security_group_id,)}
    assert len({n["SubnetId"] for n in nics}) == 1 and "SecurityGroupIds" not in run and "SubnetId" not in run
    # The security group admits its own members only (every port), and nothing else.
    [sg] = fake.moto.describe_security_groups(GroupIds=[job.security_group_id])["SecurityGroups"]
    assert [
        (p["IpProtocol"], [g["GroupId"] for g in p["UserIdGroupPairs"]], p["IpRanges"])
        for p in sg["IpPermissions"]
    ] == [("-1", [job.security_group_id], [])]
    assert {t["Key"]: t["Value"] for t in sg["Tags"]}["srifty:job-id"] == str(job.pk)
    # The user-data fetches the workdir (git at the ref), asks for its environment, runs setup once and run.
    script = user_data(fake, job.instance_ids[0])
    assert "SRIFTY_GIT_URL=https://github.com/example/bert.git" in script and "SRIFTY_GIT_REF=v1.2" in script
    assert 'git -C /opt/srifty/work/.clone checkout --quiet "$SRIFTY_GIT_REF"' in script
    assert "SRIFTY_SETUP='pip install -r requirements.txt'" in script and "/opt/srifty/setup.done" in script
    assert 'bash -euo pipefail -c "$SRIFTY_RUN"' in script and "train.py --batch" in script
    assert (
        script.index("/rendezvous/?instance_id=")
        < script.index('-c "$SRIFTY_SETUP"')
        < script.index('-c "$SRIFTY_RUN"')
    )
    assert subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True).returncode == 0
    # The rendezvous answers each node with its whole environment, EFA settings included.
    code, answer = launch.rendezvous(job, job.instance_ids[1])
    env = answer["env"]
    assert code == 200 and env["NODE_RANK"] == "1" and env["NNODES"] == "2" and env["NPROC_PER_NODE"] == "8"
    assert env["MASTER_ADDR"] == job.node_ips[job.instance_ids[0]] and env["SRIFTY_BATCH_PER_NODE"] == "256"
    assert env["SKYPILOT_NODE_IPS"].splitlines() == [job.node_ips[i] for i in job.instance_ids]
    assert (env["FI_PROVIDER"], env["FI_EFA_USE_DEVICE_RDMA"], env["DATA"]) == (
        "efa",
        "1",
        "s3://bucket/wiki",
    )
    assert "NCCL_SOCKET_NTHREADS" not in env


def test_a_type_without_efa_gets_one_plain_interface_in_the_group_and_nccl_socket_settings(fake, owner):
    job = task_job(owner, option(group("g5.xlarge", count=2, gpus=1, batch=32)))
    assert launch.launch_job(job) == "launched 2 instances"
    job.refresh_from_db()
    [run] = fake.params("RunInstances")
    assert "NetworkInterfaces" not in run and run["SecurityGroupIds"] == [job.security_group_id]
    assert run["SubnetId"].startswith("subnet-") and run["ImageId"] == AMI
    env = launch.rendezvous(job, job.instance_ids[0])[1]["env"]
    assert (env["NCCL_SOCKET_NTHREADS"], env["NCCL_NSOCKS_PERTHREAD"]) == (
        "2",
        "8",
    ) and "FI_PROVIDER" not in env


def test_a_custom_ami_overrides_the_dlami(fake, owner):
    job = task_job(owner, image_id="ami-0123456789abcdef0")
    launch.launch_job(job)
    job.refresh_from_db()
    assert (job.image_id, job.image_source) == ("ami-0123456789abcdef0", "custom")
    assert fake.params("RunInstances")[0]["ImageId"] == "ami-0123456789abcdef0"
    assert not fake.params("GetParameter")  # no SSM lookup at all


def test_a_failed_second_run_instances_takes_down_what_the_first_started(
    fake, owner, django_capture_on_commit_callbacks
):
    opt = option(
        group("p4d.24xlarge", count=1, batch=256),
        group("p4d.24xlarge", count=1, batch=128),
        group("p4d.24xlarge", count=1, batch=64),
    )
    fake.fail_run_instances_at = 2
    job = task_job(owner, opt)
    with django_capture_on_commit_callbacks(execute=True):
        assert launch.launch_job(job) == "failed to launch"
    job.refresh_from_db()
    assert fake.run_instances_calls == 2  # the third group was never asked for
    assert job.status == JobStatus.FAILED and "InsufficientInstanceCapacity" in job.status_reason
    assert len(job.instance_ids) == 1 and live(fake, job.pk) == []  # the first node was terminated
    assert fake.state(job.instance_ids[0]) == "terminated"
    assert fake.groups == {}  # the placement group went
    assert (
        fake.moto.describe_security_groups(Filters=[{"Name": "tag:srifty:job-id", "Values": [str(job.pk)]}])[
            "SecurityGroups"
        ]
        == []
    )
    assert fake.moto.describe_launch_templates()["LaunchTemplates"] == []
    kinds = list(job.events.values_list("kind", flat=True))
    assert kinds[-1] == "failed" and "launched" not in kinds  # the log says what the status says


def test_stopping_a_job_deletes_its_security_group(fake, owner, django_capture_on_commit_callbacks):
    job = task_job(owner)
    launch.launch_job(job)
    job.refresh_from_db()
    with django_capture_on_commit_callbacks(execute=True):
        jobs.stop_job(job, "stopped by alice")
    assert live(fake, job.pk) == [] and fake.groups == {}
    found = fake.moto.describe_security_groups(
        Filters=[{"Name": "group-id", "Values": [job.security_group_id]}]
    )
    assert found["SecurityGroups"] == []


def test_a_replacement_node_joins_the_running_job_with_the_next_rank(fake, owner):
    job = task_job(owner)
    launch.launch_job(job)
    job.refresh_from_db()
    ids = launch.launch_replacement(job, "p4d.24xlarge", market="spot")
    job.refresh_from_db()
    assert len(ids) == 1 and job.instance_ids[-1] == ids[0] and len(job.instance_ids) == 3
    last = fake.params("RunInstances")[-1]
    assert last["InstanceMarketOptions"]["MarketType"] == "spot" and len(last["NetworkInterfaces"]) == 4
    assert last["Placement"] == {"GroupName": job.placement_group} and last["ImageId"] == AMI
    assert launch.launch_replacement(job, "p4d.24xlarge", market="spot") == ids  # retried: not twice
    with pytest.raises(jobs.JobError):
        launch.launch_replacement(job, "g5.xlarge")


# --- task-file errors: reported, nothing created --------------------------------------------


BAD_TASK = """\
name: Bad Name
run: ""
envs:
  MASTER_ADDR: 10.0.0.1
checkpoint:
  s3: not-a-bucket
"""


def test_the_api_answers_a_bad_task_file_with_every_line_and_field_and_launches_nothing(fake, owner):
    client = APIClient()
    client.force_authenticate(owner)
    plan = plan_of(owner, option())
    body = {"plan": plan.pk, "rank": 1, "task": BAD_TASK, "max_spend_usd": "100", "max_hours": 2}
    resp = client.post("/api/v1/jobs/preview/", body, format="json")
    assert resp.status_code == 400
    problems = {(p["line"], p["field"]) for p in resp.json()["task"]}
    assert problems == {(1, "name"), (2, "run"), (4, "envs.MASTER_ADDR"), (6, "checkpoint.s3")}
    resp = client.post("/api/v1/jobs/", {**body, "confirmation": "x"}, format="json")
    assert resp.status_code == 400 and "task" in resp.json()
    assert not Job.objects.exists() and fake.params("RunInstances") == []


def test_a_local_workdir_through_the_api_without_its_archive_names_the_line_and_the_two_ways(fake, owner):
    client = APIClient()
    client.force_authenticate(owner)
    plan = plan_of(owner, option())
    task = "name: t\nworkdir: ./train\nrun: python train.py\n"
    resp = client.post(
        "/api/v1/jobs/preview/",
        {"plan": plan.pk, "rank": 1, "task": task, "max_spend_usd": "9", "max_hours": 1},
        format="json",
    )
    assert resp.status_code == 400
    [problem] = resp.json()["workdir_archive"]
    assert "(line 2)" in problem and "upload the folder as an archive" in problem and "git:" in problem


def test_the_api_previews_and_launches_a_task_file(fake, owner, django_capture_on_commit_callbacks):
    client = APIClient()
    client.force_authenticate(owner)
    plan = plan_of(owner, option())
    body = {"plan": plan.pk, "rank": 1, "task": TASK, "max_spend_usd": "100", "max_hours": 2}
    shown = client.post("/api/v1/jobs/preview/", body, format="json").json()
    assert shown["task"] == TASK and shown["confirmation"] and shown["nodes"] == 2
    changed = client.post(
        "/api/v1/jobs/",
        {**body, "task": TASK + "# edited\n", "confirmation": shown["confirmation"]},
        format="json",
    )
    assert changed.status_code == 400 and "confirmation" in changed.json()  # the id binds the file's text
    with django_capture_on_commit_callbacks(execute=True):
        made = client.post("/api/v1/jobs/", {**body, "confirmation": shown["confirmation"]}, format="json")
    assert made.status_code == 201, made.content
    job = Job.objects.get(pk=made.json()["id"])
    assert job.task == TASK and job.status == JobStatus.RUNNING and made.json()["image_id"] == ""
    assert Job.objects.get(pk=job.pk).image_id == AMI


# --- manage.py launch ------------------------------------------------------------------------


def test_manage_py_launch_uploads_the_workdir_and_the_nodes_fetch_it_with_their_token(
    fake, owner, monkeypatch, capsys
):
    monkeypatch.chdir(ROOT)
    fake.quotas.update({"L-417A185B": 1000})
    plan = plan_of(owner, option())
    call_command(
        "launch",
        "--plan",
        str(plan.pk),
        "--option",
        "1",
        "--task",
        "examples/task.yaml",
        "--yes",
        "--user",
        owner.username,
    )
    out = capsys.readouterr().out
    job = Job.objects.get()
    assert job.status == JobStatus.RUNNING and job.workdir_archive.endswith(".tar.gz")
    assert "check credentials: ok" in out and "check quota: ok: on-demand P vCPUs: 192 needed" in out
    assert f"image: {AMI}" in out and f"job {job.pk}: launched 2 instances" in out
    script = user_data(fake, job.instance_ids[0])
    url = f"https://srifty.example.com/api/v1/jobs/{job.pk}/workdir.tar.gz"
    assert f"SRIFTY_WORKDIR_URL={url}" in script and "python -m pip install --quiet torchvision" in script
    node = APIClient()
    node.credentials(HTTP_AUTHORIZATION=f"Bearer {jobs.derived_token(job)}")
    got = node.get(f"/api/v1/jobs/{job.pk}/workdir.tar.gz")
    assert got.status_code == 200
    names = tarfile.open(fileobj=io.BytesIO(b"".join(got.streaming_content)), mode="r:gz").getnames()
    assert "train.py" in names
    assert APIClient().get(f"/api/v1/jobs/{job.pk}/workdir.tar.gz").status_code == 401


def test_manage_py_launch_reports_a_bad_task_file_with_lines_and_launches_nothing(fake, owner, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD_TASK)
    plan = plan_of(owner, option())
    with pytest.raises(CommandError) as err:
        call_command("launch", "--plan", str(plan.pk), "--task", str(bad), "--yes", "--user", owner.username)
    text = str(err.value)
    assert "4 error(s)" in text and f"{bad}:line 4: envs.MASTER_ADDR" in text
    assert not Job.objects.exists()


def test_manage_py_launch_stops_at_a_failed_pre_check(fake, owner, monkeypatch):
    monkeypatch.chdir(ROOT)
    fake.quotas.update({"L-417A185B": 96})  # one p4d.24xlarge fits, two do not
    plan = plan_of(owner, option())
    with pytest.raises(CommandError, match="1 pre-check"):
        call_command(
            "launch",
            "--plan",
            str(plan.pk),
            "--task",
            "examples/task.yaml",
            "--yes",
            "--user",
            owner.username,
        )
    assert not Job.objects.exists() and fake.params("RunInstances") == []


def test_the_node_script_sources_its_environment_runs_setup_once_and_run_every_time(tmp_path, settings):
    """The script's tail, run for real with bash (the node's paths moved into tmp_path): the
    environment the rendezvous wrote is exported, setup runs once per node (a rebooted node
    skips it), run runs in the workdir with the node's variables."""
    from launcher import options, taskfile

    settings.SITE_URL = "https://srifty.example.com"
    spec = taskfile.parse_task(
        'name: t\nsetup: echo setup >> $LOG\nrun: |\n  echo "run $NODE_RANK/$NNODES batch $SRIFTY_BATCH_PER_NODE in $(basename $PWD)" >> $LOG\n'
    )
    script = options.user_data(5, spec, "tok", 30).replace("/opt/srifty", str(tmp_path))
    lines = script.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("export SRIFTY_SERVER="))
    head = lines[first : lines.index("", first)]  # its variables (the quoted run spans lines)
    tail = lines[next(i for i, line in enumerate(lines) if line.startswith(f". {tmp_path}/node.env")) :]
    (tmp_path / "work").mkdir()
    log = tmp_path / "log.txt"
    env = taskfile.node_env(spec, option(group(count=2)), 1, ["10.0.0.1", "10.0.0.2"])
    (tmp_path / "node.env").write_text(
        "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items()) + f"export LOG={log}\n"
    )
    program = "set -euo pipefail\n" + "\n".join(head + tail)
    for _ in range(2):
        done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
    assert log.read_text().splitlines() == ["setup", "run 1/2 batch 256 in work", "run 1/2 batch 256 in work"]


# --- secrets in the task file ------------------------------------------------------------------

SECRET_TASK = TASK + "  HF_TOKEN: hf_s3cr3tValue0123456789\n  WANDB_API_KEY: 'wandb-0a1b2c3d'\n"


def test_credential_envs_are_redacted_where_people_read_the_job_but_reach_the_nodes(fake, owner, client):
    job = task_job(owner, task=SECRET_TASK)
    assert launch.launch_job(job) == "launched 2 instances"
    job.refresh_from_db()
    api = APIClient()
    api.force_authenticate(owner)
    shown = api.get(f"/api/v1/jobs/{job.pk}/").json()["task"]
    client.force_login(owner)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    for text in (shown, page):
        assert "hf_s3cr3tValue0123456789" not in text and "wandb-0a1b2c3d" not in text
        assert "HF_TOKEN: &lt;redacted&gt;" in text or "HF_TOKEN: <redacted>" in text
        assert "DATA: s3://bucket/wiki" in text  # not a credential: shown as written
    assert shown == SECRET_TASK.replace("hf_s3cr3tValue0123456789", "<redacted>").replace(
        "wandb-0a1b2c3d", "<redacted>"
    )
    env = launch.rendezvous(job, job.instance_ids[0])[1]["env"]
    assert (env["HF_TOKEN"], env["WANDB_API_KEY"]) == ("hf_s3cr3tValue0123456789", "wandb-0a1b2c3d")
    assert Job.objects.get(pk=job.pk).task == SECRET_TASK  # stored whole for the nodes and re-plans
