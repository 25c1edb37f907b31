"""A job's rendezvous reads the environment prepared once at launch (``Job.node_env``): a node's
poll neither parses the task file nor recomputes the checkpoint interval."""

from __future__ import annotations

import pytest

from launcher import launch, options, spot_policy
from launcher.models import Job
from tests.launcher.test_task_launch import fake, group, option, owner, task_job  # noqa: F401

pytestmark = pytest.mark.django_db

CHECKPOINTED = """\
name: ckpt
run: python train.py
envs:
  DATA: s3://bucket/wiki
checkpoint: {s3: 's3://bucket/ckpt', interval: 45m}
"""


def test_the_launch_prepares_each_types_environment_once(fake, owner):  # noqa: F811
    job = task_job(owner, option(group("g5.xlarge", count=2, gpus=1, batch=32)), task=CHECKPOINTED)
    assert launch.launch_job(job) == "launched 2 instances"
    prepared = Job.objects.get(pk=job.pk).node_env
    assert list(prepared) == ["g5.xlarge"]
    assert prepared["g5.xlarge"]["DATA"] == "s3://bucket/wiki"
    assert prepared["g5.xlarge"]["SRIFTY_CHECKPOINT_INTERVAL_S"] == "2700"  # 45 min, the file's
    assert prepared["g5.xlarge"]["NCCL_SOCKET_NTHREADS"] == "2"  # the type's network settings


def test_a_poll_parses_no_task_and_computes_no_interval(fake, owner, monkeypatch):  # noqa: F811
    job = task_job(owner, option(group("g5.xlarge", count=2, gpus=1, batch=32)), task=CHECKPOINTED)
    launch.launch_job(job)
    job = Job.objects.get(pk=job.pk)

    def no(*args, **kwargs):
        raise AssertionError("recomputed on a poll")

    monkeypatch.setattr(options, "task_spec", no)
    monkeypatch.setattr(spot_policy, "option_interval_min", no)
    for rank, instance in enumerate(job.instance_ids):
        code, answer = launch.rendezvous(job, instance)
        env = answer["env"]
        assert code == 200 and env["NODE_RANK"] == str(rank) and env["SRIFTY_CHECKPOINT_INTERVAL_S"] == "2700"
        assert env["MASTER_ADDR"] == job.node_ips[job.instance_ids[0]] and env["DATA"] == "s3://bucket/wiki"


def test_a_job_without_a_prepared_environment_gets_it_at_its_first_poll(fake, owner):  # noqa: F811
    job = task_job(owner, option(group("g5.xlarge", count=2, gpus=1, batch=32)), task=CHECKPOINTED)
    launch.launch_job(job)
    Job.objects.filter(pk=job.pk).update(node_env={})  # launched before the field existed
    job = Job.objects.get(pk=job.pk)
    env = launch.rendezvous(job, job.instance_ids[1])[1]["env"]
    assert env["SRIFTY_CHECKPOINT_INTERVAL_S"] == "2700" and env["NODE_RANK"] == "1"
    assert Job.objects.get(pk=job.pk).node_env["g5.xlarge"]["DATA"] == "s3://bucket/wiki"
