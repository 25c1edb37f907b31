"""End to end over real HTTP: the training callback posting to a live server, and a small real
DDP run (2 processes, gloo on CPU, torch.multiprocessing) whose ranks report through
``profiler.agent.report.Reporter``; the job API then shows observed vs predicted."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from decimal import Decimal
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import Permission
from rest_framework.test import APIClient

from launcher import jobs
from launcher.models import JobReport
from planner.app.models import PlanRecord
from profiler.agent.posting import RetryPolicy, _post_urllib
from profiler.agent.report import Reporter

pytestmark = pytest.mark.django_db(transaction=True)

OPTION = {
    "rank": 1,
    "region": "us-east-1",
    "global_batch": 16,
    "hourly_usd": 1.0,
    "iter_time_s": 0.05,
    "iter_time_p90_s": 0.08,
    "time_h": 1.0,
    "throughput_sps": 10.0,
    "groups": [
        {
            "instance_type": "c5.xlarge",
            "market": "on-demand",
            "zone": None,
            "count": 2,
            "gpus_per_node": 1,
            "gpu_model": "",
            "price_per_hour": 0.5,
            "batch_per_node": [8, 8],
            "interruption_bucket": 0,
        }
    ],
}

TRAIN = textwrap.dedent("""
    # One torch import, then two forked ranks (a torchrun per rank would import torch three times).
    import os, socket, sys, time
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP

    def rank_main(rank, world, port):
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        from profiler.agent.report import Reporter

        torch.set_num_threads(1)
        dist.init_process_group("gloo", rank=rank, world_size=world)
        torch.manual_seed(rank)
        model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        batch = int(os.environ.get("SRIFTY_PER_NODE_BATCH", "8"))
        reporter = Reporter.from_env(batch_size=10, flush_interval_s=0.5)
        for _ in range(30):
            with reporter.timer(samples=batch):
                x, y = torch.randn(batch, 32), torch.randint(0, 4, (batch,))
                opt.zero_grad(set_to_none=True)
                torch.nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
                time.sleep(0.01)
        reporter.close()
        dist.destroy_process_group()

    if __name__ == "__main__":
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.start_processes(rank_main, args=(2, port), nprocs=2, join=True, start_method="fork")
""")


@pytest.fixture
def job_and_token(user, settings):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    user.user_permissions.add(Permission.objects.get(codename="add_job", content_type__app_label="launcher"))
    owner = type(user).objects.get(pk=user.pk)
    plan = PlanRecord.objects.create(
        owner=owner, request={"total_samples": 16 * 100}, status="solved", result={"plans": [OPTION]}
    )
    job = jobs.create_job(owner, plan, 1, "train.py", Decimal("10"), 5, confirm=True)
    token = jobs.issue_token(job)
    jobs.mark_launched(job, instance_ids=["i-0a", "i-0b"], node_ips={"i-0a": "127.0.0.1"})
    return jobs.mark_running(job, "launched"), token


def test_the_callback_posts_over_http_and_a_retried_post_is_stored_once(live_server, job_and_token):
    job, token = job_and_token
    sent = []

    def post_twice(url, body, headers, timeout):  # as if the first answer got lost and the post was retried
        sent.append(_post_urllib(url, body, headers, timeout))
        sent.append(_post_urllib(url, body, headers, timeout))
        return sent[-1]

    reporter = Reporter(
        live_server.url,
        job.pk,
        token,
        rank=1,
        batch_size=5,
        transport=post_twice,
        retry=RetryPolicy(attempts=2, initial_delay_s=0.05, timeout_s=10),
    )
    for i in range(1, 13):
        reporter.step(i, 0.05, samples=8)
    reporter.close(timeout_s=30)
    assert sent == [201, 200] * 3 and reporter.sent == 12
    assert list(
        JobReport.objects.filter(job=job).order_by("iteration").values_list("iteration", flat=True)
    ) == list(range(1, 13))


@pytest.mark.slow
def test_a_real_ddp_run_reports_every_rank_and_the_api_shows_observed_vs_predicted(
    live_server, job_and_token, tmp_path, user
):
    job, token = job_and_token
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    env = {
        **os.environ,
        "SRIFTY_SERVER": live_server.url,
        "SRIFTY_JOB_ID": str(job.pk),
        "SRIFTY_TOKEN": token,
        "SRIFTY_PER_NODE_BATCH": "8",
        "PYTHONPATH": str(Path(django_settings.BASE_DIR)),
        "OMP_NUM_THREADS": "1",
    }
    done = subprocess.run(
        [sys.executable, str(script)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert JobReport.objects.filter(job=job).count() == 60
    assert set(JobReport.objects.filter(job=job).values_list("rank", flat=True)) == {0, 1}

    api = APIClient()
    api.force_authenticate(user)
    detail = api.get(f"/api/v1/jobs/{job.pk}/").json()
    seen = detail["observed"]
    assert seen["reports"] == 60 and seen["predicted_iter_s"] == 0.05 and seen["predicted_iter_p90_s"] == 0.08
    assert 0.01 <= seen["median_iter_s"] < 5 and seen["ratio"] == pytest.approx(
        seen["median_iter_s"] / 0.05, rel=1e-3
    )
    assert {r["rank"] for r in seen["series"]} == {0, 1} and len(seen["series"]) == 60
    assert detail["progress"]["iterations"] == 30 and detail["progress"]["done_samples"] == 60 * 8
