"""The EC2 provider end to end against moto's server: launch, report, terminate."""

import base64
from datetime import timedelta

import boto3
import pytest
from django.utils import timezone

from profiler import actions, tasks
from profiler.models import ProfilingRun, RunStatus

pytestmark = pytest.mark.django_db


@pytest.fixture
def ec2_run(make_run, aws, settings):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.immediate.ImmediateBackend"}}
    settings.SITE_URL = "https://srifty.example.com"
    return make_run(
        provider="ec2", instance_type="g5.xlarge", region="us-east-1", market="spot", device="cuda"
    )


def _ec2(aws):
    return boto3.client("ec2", region_name="us-east-1", endpoint_url=aws)


def _instance(aws, instance_id):
    return _ec2(aws).describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]


def test_a_run_launches_one_tagged_self_terminating_spot_instance(ec2_run, aws):
    assert tasks.start_run(ec2_run).startswith("started")
    run = ProfilingRun.objects.get(pk=ec2_run.pk)
    assert run.status == RunStatus.STARTING and len(run.instance_ids) == 1
    inst = _instance(aws, run.instance_ids[0])
    tags = {t["Key"]: t["Value"] for t in inst["Tags"]}
    assert tags["srifty:run-id"] == str(run.pk) and tags["srifty:managed"] == "true"
    assert inst["InstanceType"] == "g5.xlarge" and inst.get("InstanceLifecycle") == "spot"
    attr = _ec2(aws).describe_instance_attribute(InstanceId=inst["InstanceId"], Attribute="userData")
    script = base64.b64decode(attr["UserData"]["Value"]).decode()
    assert "shutdown -h +" in script.splitlines()[1]  # hard limit enforced by the VM itself
    assert f"https://srifty.example.com/api/v1/profiling-runs/{run.pk}/events/" in script
    assert "--device cuda" in script.replace("'", "")
    behaviour = _ec2(aws).describe_instance_attribute(
        InstanceId=inst["InstanceId"], Attribute="instanceInitiatedShutdownBehavior"
    )
    assert behaviour["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"


def _state(aws, instance_id) -> str:
    return _instance(aws, instance_id)["State"]["Name"]


def test_the_instance_is_terminated_when_the_run_completes(
    ec2_run, aws, compute_profile, django_capture_on_commit_callbacks
):
    tasks.start_run(ec2_run)
    run = ProfilingRun.objects.get(pk=ec2_run.pk)
    compute_profile["device"]["type"] = "cuda"
    with django_capture_on_commit_callbacks(execute=True):
        actions.record_event(run, {"seq": 1, "type": "result", "profile": compute_profile})
    assert ProfilingRun.objects.get(pk=run.pk).status == RunStatus.SUCCEEDED
    assert _state(aws, run.instance_ids[0]) in ("shutting-down", "terminated")


def test_the_instance_is_terminated_when_the_agent_fails(ec2_run, aws, django_capture_on_commit_callbacks):
    tasks.start_run(ec2_run)
    run = ProfilingRun.objects.get(pk=ec2_run.pk)
    with django_capture_on_commit_callbacks(execute=True):
        actions.record_event(run, {"seq": 1, "type": "error", "message": "CUDA out of memory at batch 1"})
    assert _state(aws, run.instance_ids[0]) in ("shutting-down", "terminated")


def test_the_instance_is_terminated_at_the_hard_limit(ec2_run, aws, django_capture_on_commit_callbacks):
    tasks.start_run(ec2_run)
    ProfilingRun.objects.filter(pk=ec2_run.pk).update(deadline_at=timezone.now() - timedelta(seconds=1))
    run = ProfilingRun.objects.get(pk=ec2_run.pk)
    with django_capture_on_commit_callbacks(execute=True):
        assert tasks.watch_run(run) == "timed out"
    assert _state(aws, run.instance_ids[0]) in ("shutting-down", "terminated")
    assert "hard time limit" in ProfilingRun.objects.get(pk=run.pk).error


def test_a_vanished_instance_fails_the_run(ec2_run, aws):
    tasks.start_run(ec2_run)
    run = ProfilingRun.objects.get(pk=ec2_run.pk)
    _ec2(aws).terminate_instances(InstanceIds=run.instance_ids)  # e.g. spot reclaimed it
    assert tasks.watch_run(run) == "failed"
    assert "instance stopped" in ProfilingRun.objects.get(pk=run.pk).error


def test_a_launch_error_fails_the_run_cleanly(make_run, aws, settings):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    settings.AWS_ENDPOINT_URL = "http://127.0.0.1:9"  # EC2 unreachable
    run = make_run(provider="ec2", instance_type="g5.xlarge", region="us-east-1")
    assert tasks.start_run(run) == "failed to start"
    run.refresh_from_db()
    assert (
        run.status == RunStatus.FAILED and "could not start the agent" in run.error and not run.instance_ids
    )
