"""The jobs REST API: preview -> confirmed launch on moto, permissions, clear 400s, team
visibility, stop, and the node endpoints (reports, rendezvous) with the job token."""

from __future__ import annotations

import base64
from decimal import Decimal

import pytest
from django.contrib.auth.models import Group, Permission
from rest_framework.test import APIClient

from accounts.tokens import issue_api_token
from cloud import ec2, session
from launcher import jobs, options
from launcher.models import Job, JobReport, JobStatus
from planner.app.models import PlanRecord

pytestmark = pytest.mark.django_db
REGION = "us-east-1"


def group(instance_type="g5.xlarge", market="spot", count=2, batch=32, price=0.5):
    return {
        "instance_type": instance_type,
        "market": market,
        "zone": "use1-az1",
        "count": count,
        "gpus_per_node": 1,
        "gpu_model": "A10G",
        "price_per_hour": price,
        "batch_per_node": [batch] * count,
        "interruption_bucket": 1,
    }


def option(rank=1, groups=None):
    groups = groups or [group()]
    hourly = sum(g["count"] * g["price_per_hour"] for g in groups)
    return {
        "rank": rank,
        "region": REGION,
        "groups": groups,
        "global_batch": sum(sum(g["batch_per_node"]) for g in groups),
        "nodes": sum(g["count"] for g in groups),
        "gpus": sum(g["count"] for g in groups),
        "hourly_usd": hourly,
        "total_usd": hourly * 2,
        "time_h": 2.0,
        "time_p90_h": 2.4,
        "throughput_sps": 100.0,
        "iter_time_s": 0.5,
        "iter_time_p90_s": 0.6,
        "bottleneck": "compute",
        "why": "cheapest",
    }


def grant(user, codename="add_job"):
    user.user_permissions.add(Permission.objects.get(codename=codename, content_type__app_label="launcher"))


@pytest.fixture
def plan(user):
    return PlanRecord.objects.create(
        owner=user,
        request={"total_samples": 64_000},
        status="solved",
        result={"plans": [option(1), option(2, [group(count=1, market="on-demand")])]},
    )


@pytest.fixture
def launcher_api(user, user_api):
    grant(user)
    return user_api


@pytest.fixture
def cloud(aws, settings, monkeypatch):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.immediate.ImmediateBackend"}}
    settings.SITE_URL = "https://srifty.example.com"
    monkeypatch.setattr(ec2, "create_placement_group", lambda region, name: None)  # not in moto
    monkeypatch.setattr(ec2, "delete_placement_group", lambda region, name: None)
    return session.client("ec2", REGION)


@pytest.fixture
def running(user, plan):
    """A running job (no EC2) with its node token: (job, token)."""
    grant(user)
    owner = type(user).objects.get(pk=user.pk)
    job = jobs.create_job(owner, plan, 1, "train.py", Decimal("50"), 10, confirm=True)
    token = jobs.issue_token(job)
    jobs.mark_launched(
        job, instance_ids=["i-0aaa", "i-0bbb"], node_ips={"i-0aaa": "10.0.0.5", "i-0bbb": "10.0.0.6"}
    )
    return jobs.mark_running(job, "launched"), token


def body(plan, **kw):
    return {
        "plan": plan.pk,
        "rank": 1,
        "train_command": "train.py --epochs 3",
        "max_spend_usd": "40",
        "max_hours": 100,
        **kw,
    }


def agent(token: str) -> APIClient:
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return c


# --- launching ----------------------------------------------------------------------------


def test_preview_then_create_launches_exactly_the_previewed_instances(
    cloud, launcher_api, plan, django_capture_on_commit_callbacks
):
    shown = launcher_api.post("/api/v1/jobs/preview/", body(plan), format="json")
    assert shown.status_code == 200, shown.content
    preview = shown.json()
    assert preview["instances"] == [
        {
            "instance_type": "g5.xlarge",
            "count": 2,
            "market": "spot",
            "zone": "use1-az1",
            "gpus_per_node": 1,
            "gpu_model": "A10G",
            "batch_per_node": 32,
            "price_per_hour": "0.5000",
            "hourly_usd": "1.0000",
        }
    ]
    assert (
        preview["hourly_usd"] == "1" and preview["max_spend_usd"] == "40.00" and preview["cap_hours"] == 40.0
    )
    assert preview["confirmation"] and not Job.objects.exists()  # a preview launches nothing

    with django_capture_on_commit_callbacks(execute=True):
        made = launcher_api.post(
            "/api/v1/jobs/", body(plan, confirmation=preview["confirmation"]), format="json"
        )
    assert made.status_code == 201, made.content
    job = Job.objects.get(pk=made.json()["id"])
    assert job.status == JobStatus.RUNNING and job.max_spend_usd == Decimal("40.00")
    found = [
        i
        for r in cloud.describe_instances(Filters=[{"Name": "tag:srifty:job-id", "Values": [str(job.pk)]}])[
            "Reservations"
        ]
        for i in r["Instances"]
    ]
    assert len(found) == 2 and {i["InstanceType"] for i in found} == {"g5.xlarge"}
    assert {i.get("InstanceLifecycle") for i in found} == {"spot"}
    assert {i["Placement"]["AvailabilityZone"] for i in found} == {"us-east-1b"}  # use1-az1 in moto
    script = base64.b64decode(
        cloud.describe_instance_attribute(InstanceId=found[0]["InstanceId"], Attribute="userData")[
            "UserData"
        ]["Value"]
    ).decode()
    assert script.splitlines()[1].startswith("shutdown -h +2400")  # the 40 h cap, on the VM itself
    assert "torchrun --nnodes" in script and "/rendezvous/?instance_id=" in script  # batch: from the server


def test_nothing_launches_without_a_matching_confirmation(cloud, launcher_api, plan):
    assert launcher_api.post("/api/v1/jobs/", body(plan), format="json").json() == {
        "confirmation": ["This field is required."]
    }
    forged = launcher_api.post("/api/v1/jobs/", body(plan, confirmation="forged"), format="json")
    assert forged.status_code == 400 and forged.json() == {"confirmation": ["not a valid confirmation id"]}
    token = launcher_api.post("/api/v1/jobs/preview/", body(plan), format="json").json()["confirmation"]
    for changed in ({"max_spend_usd": "400"}, {"max_hours": 200}, {"rank": 2}, {"train_command": "evil.py"}):
        resp = launcher_api.post("/api/v1/jobs/", body(plan, confirmation=token, **changed), format="json")
        assert resp.status_code == 400 and "preview again" in resp.json()["confirmation"][0], changed
    assert not Job.objects.exists() and not ec2.find_managed(REGION)


def test_an_expired_confirmation_is_refused(launcher_api, plan, settings):
    token = launcher_api.post("/api/v1/jobs/preview/", body(plan), format="json").json()["confirmation"]
    settings.JOB_CONFIRM_MAX_AGE_S = -1
    resp = launcher_api.post("/api/v1/jobs/", body(plan, confirmation=token), format="json")
    assert resp.status_code == 400 and "expired" in resp.json()["confirmation"][0]


def test_another_users_confirmation_does_not_launch(launcher_api, plan, django_user_model):
    token = launcher_api.post("/api/v1/jobs/preview/", body(plan), format="json").json()["confirmation"]
    bob = django_user_model.objects.create_user("bob", password="b-pass-12345")
    grant(bob)
    bob.groups.add(team := Group.objects.create(name="team"))
    plan.owner.groups.add(team)  # bob may see the plan, but the confirmation is alice's
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Token {issue_api_token(bob).key}")
    resp = c.post("/api/v1/jobs/", body(plan, confirmation=token), format="json")
    assert resp.status_code == 400 and "another launch" in resp.json()["confirmation"][0]


def test_launching_needs_the_add_job_permission(user_api, plan, api):
    assert user_api.post("/api/v1/jobs/preview/", body(plan), format="json").status_code == 403
    resp = user_api.post("/api/v1/jobs/", body(plan, confirmation="x"), format="json")
    assert resp.status_code == 403 and "launcher.add_job" in resp.json()["detail"]
    assert api.post("/api/v1/jobs/preview/", body(plan), format="json").status_code == 401
    assert not Job.objects.exists()


def test_superusers_may_launch(staff, plan):
    c = APIClient()
    c.force_authenticate(staff)
    assert c.post("/api/v1/jobs/preview/", body(plan), format="json").status_code == 200


def test_bad_fields_get_400s_that_name_them(launcher_api, plan):
    resp = launcher_api.post(
        "/api/v1/jobs/preview/", body(plan, train_command="", max_hours=-1, max_spend_usd="x"), format="json"
    )
    assert resp.status_code == 400 and set(resp.json()) == {"train_command", "max_hours", "max_spend_usd"}
    resp = launcher_api.post("/api/v1/jobs/preview/", body(plan, rank=9), format="json")
    assert resp.json() == {"rank": ["the plan has no option 9"]}
    resp = launcher_api.post(
        "/api/v1/jobs/preview/", body(plan, train_command="train.py 'unclosed"), format="json"
    )
    assert resp.status_code == 400 and "train_command" in resp.json()
    resp = launcher_api.post("/api/v1/jobs/preview/", body(plan, train_command="x" * 4001), format="json")
    assert resp.status_code == 400 and "train_command" in resp.json()
    pending = PlanRecord.objects.create(owner=plan.owner, request={}, status="pending")
    resp = launcher_api.post("/api/v1/jobs/preview/", body(pending), format="json")
    assert resp.json() == {"plan": ["the plan is pending, not solved"]}


def test_another_teams_plan_cannot_be_launched(launcher_api, django_user_model):
    eve = django_user_model.objects.create_user("eve", password="e-pass-12345")
    theirs = PlanRecord.objects.create(owner=eve, request={}, status="solved", result={"plans": [option()]})
    resp = launcher_api.post("/api/v1/jobs/preview/", body(theirs), format="json")
    assert resp.status_code == 400 and resp.json() == {"plan": ["no such plan"]}


# --- reading and stopping -----------------------------------------------------------------


def test_jobs_are_visible_to_the_team_only(running, user_api, django_user_model):
    job, _ = running
    assert [j["id"] for j in user_api.get("/api/v1/jobs/").json()["results"]] == [job.pk]
    detail = user_api.get(f"/api/v1/jobs/{job.pk}/").json()
    assert detail["instance_ids"] == ["i-0aaa", "i-0bbb"] and detail["nodes"] == 2
    assert "token_hash" not in detail and "launch_token" not in detail
    eve = django_user_model.objects.create_user("eve", password="e-pass-12345")
    c = APIClient()
    c.force_authenticate(eve)
    assert c.get("/api/v1/jobs/").json()["results"] == []
    assert c.get(f"/api/v1/jobs/{job.pk}/").status_code == 404
    assert c.post(f"/api/v1/jobs/{job.pk}/stop/").status_code == 404
    team = Group.objects.create(name="ml")
    eve.groups.add(team)
    job.owner.groups.add(team)
    assert c.get(f"/api/v1/jobs/{job.pk}/").status_code == 200
    assert c.post(f"/api/v1/jobs/{job.pk}/stop/").status_code == 403  # a teammate sees, the owner stops


def test_the_owner_stops_a_job(running, user_api, settings):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    job, token = running
    resp = user_api.post(f"/api/v1/jobs/{job.pk}/stop/")
    assert resp.status_code == 200 and resp.json()["status"] == "stopped"
    assert "stopped by alice" in resp.json()["status_reason"]
    assert agent(token).get(f"/api/v1/jobs/{job.pk}/rendezvous/?instance_id=i-0aaa").status_code == 401


# --- the nodes' endpoints -----------------------------------------------------------------


def test_reports_are_stored_once_per_rank_and_seq(running):
    job, token = running
    batch = {
        "seq": 10,
        "rank": 1,
        "reports": [
            {"iteration": 1, "iter_time_s": 0.51, "samples": 32},
            {"iteration": 2, "iter_time_s": 0.49},
        ],
    }
    first = agent(token).post(f"/api/v1/jobs/{job.pk}/reports/", batch, format="json")
    assert first.status_code == 201 and first.json()["stored"] == 2
    again = agent(token).post(f"/api/v1/jobs/{job.pk}/reports/", batch, format="json")
    assert again.status_code == 200 and again.json() == {"seq": 10, "stored": 0, "duplicate": True}
    other_rank = agent(token).post(f"/api/v1/jobs/{job.pk}/reports/", {**batch, "rank": 0}, format="json")
    assert other_rank.json()["stored"] == 2
    assert list(JobReport.objects.filter(job=job, rank=1).values_list("seq", "iteration", "samples")) == [
        (10, 1, 32),
        (11, 2, None),
    ]


def test_report_posts_are_checked(running):
    job, token = running
    resp = agent(token).post(
        f"/api/v1/jobs/{job.pk}/reports/",
        {"seq": 0, "rank": -1, "reports": [{"iteration": 1, "iter_time_s": -2}]},
        format="json",
    )
    assert resp.status_code == 400 and {"seq", "rank", "reports"} <= set(resp.json())
    resp = agent(token).post(
        f"/api/v1/jobs/{job.pk}/reports/", {"seq": 1, "rank": 0, "reports": []}, format="json"
    )
    assert resp.status_code == 400 and "reports" in resp.json()


def test_a_job_token_works_for_its_own_job_only(running, plan, user):
    job, token = running
    other = jobs.create_job(
        type(user).objects.get(pk=user.pk), plan, 1, "train.py", Decimal("5"), 1, confirm=True
    )
    assert agent(token).post(f"/api/v1/jobs/{other.pk}/reports/", {}, format="json").status_code == 403
    assert agent("wrong").post(f"/api/v1/jobs/{job.pk}/reports/", {}, format="json").status_code == 401
    user_client = APIClient()
    user_client.force_authenticate(user)  # a user is not a node
    assert user_client.post(f"/api/v1/jobs/{job.pk}/reports/", {}, format="json").status_code in (401, 403)


def test_rendezvous_names_the_master_and_each_nodes_rank(running):
    job, token = running
    url = f"/api/v1/jobs/{job.pk}/rendezvous/"
    answer = agent(token).get(url, {"instance_id": "i-0bbb"}).json()
    env = answer.pop("env")
    assert answer == {"master_addr": "10.0.0.5", "node_rank": 1, "nnodes": 2}
    # The node's whole environment (launcher.taskfile.node_env): torchrun's names and SkyPilot's.
    assert (env["MASTER_ADDR"], env["NODE_RANK"], env["NNODES"], env["MASTER_PORT"]) == (
        "10.0.0.5",
        "1",
        "2",
        "29500",
    )
    assert env["SKYPILOT_NODE_RANK"] == "1" and env["SKYPILOT_NODE_IPS"].splitlines()[0] == "10.0.0.5"
    assert env["SRIFTY_BATCH_PER_NODE"] == "32" and env["NCCL_SOCKET_NTHREADS"] == "2"  # g5.xlarge: no EFA
    assert agent(token).get(url, {"instance_id": "i-0aaa"}).json()["node_rank"] == 0
    assert agent(token).get(url, {"instance_id": "i-0zzz"}).status_code == 403  # not a node of this job
    assert agent(token).get(url).status_code == 400


def test_rendezvous_says_wait_while_the_cluster_launches(user, plan):
    grant(user)
    job = jobs.create_job(
        type(user).objects.get(pk=user.pk), plan, 1, "train.py", Decimal("50"), 10, confirm=True
    )
    token = jobs.issue_token(job)
    jobs.mark_launched(job, instance_ids=["i-0aaa"], node_ips={"i-0aaa": "10.0.0.5"})
    resp = agent(token).get(f"/api/v1/jobs/{job.pk}/rendezvous/", {"instance_id": "i-0aaa"})
    assert resp.status_code == 202  # the second group is not launched yet
    assert (
        agent(token).get(f"/api/v1/jobs/{job.pk}/rendezvous/", {"instance_id": "i-0new"}).status_code == 202
    )


def test_nodes_download_the_reporter_package_with_their_token(running):
    import io
    import tarfile

    job, token = running
    resp = agent(token).get(f"/api/v1/jobs/{job.pk}/agent.tar.gz")
    assert resp.status_code == 200
    names = tarfile.open(fileobj=io.BytesIO(resp.content)).getnames()
    assert "profiler/agent/report.py" in names and "profiler/__init__.py" in names
    assert "profiler/agent/spotwatch.py" in names  # the node script starts the spot watcher from it
    assert APIClient().get(f"/api/v1/jobs/{job.pk}/agent.tar.gz").status_code == 401
    assert options.agent_url(job.pk).endswith(f"/api/v1/jobs/{job.pk}/agent.tar.gz")


def test_rendezvous_gives_the_checkpoint_interval_of_the_task_file(user, plan):
    grant(user)
    owner = type(user).objects.get(pk=user.pk)
    task = "name: ckpt\nrun: python train.py\ncheckpoint: {s3: 's3://bucket/ckpt', interval: 45m}\n"
    job = jobs.create_job(owner, plan, 1, "", Decimal("50"), 10, confirm=True, task=task)
    token = jobs.issue_token(job)
    jobs.mark_launched(
        job, instance_ids=["i-0aaa", "i-0bbb"], node_ips={"i-0aaa": "10.0.0.5", "i-0bbb": "10.0.0.6"}
    )
    jobs.mark_running(job, "launched")
    env = agent(token).get(f"/api/v1/jobs/{job.pk}/rendezvous/", {"instance_id": "i-0aaa"}).json()["env"]
    assert env["SRIFTY_CHECKPOINT_INTERVAL_S"] == "2700"  # 45 min, as the task file says


def test_rendezvous_gives_no_checkpoint_interval_without_a_checkpoint(running):
    job, token = running
    env = agent(token).get(f"/api/v1/jobs/{job.pk}/rendezvous/", {"instance_id": "i-0aaa"}).json()["env"]
    assert "SRIFTY_CHECKPOINT_INTERVAL_S" not in env


@pytest.mark.parametrize("flag", [True, False])
def test_a_boolean_is_not_a_number_of_hours(launcher_api, plan, flag):
    for url in ("/api/v1/jobs/preview/", "/api/v1/jobs/"):
        resp = launcher_api.post(url, body(plan, max_hours=flag, confirmation="x"), format="json")
        assert resp.status_code == 400 and "max_hours" in resp.json(), (url, resp.content[:200])
