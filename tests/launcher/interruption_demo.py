"""A simulated spot interruption and its resume, printed for the issue's closing note.

    .venv/bin/python -m pytest -q -s tests/launcher/interruption_demo.py -p no:cacheprovider

Not collected by the suite (no ``test_`` file name); it goes through the real paths: a job
launched on moto, checkpoints posted with the job token, the node's watcher
(``python -m profiler.agent.spotwatch``) reading a stand-in IMDS and posting the notice to the
live server, the watch pass that records the interruption and launches the replacement, and the
replacement's first report, which the next pass records as the resume."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher import launch, monitor
from launcher.models import Job, JobInterruption
from tests.launcher.test_interruptions import MIN, plan, report_at, running, token_client  # noqa: F401
from tests.launcher.test_monitor import replanner  # noqa: F401
from tests.launcher.test_spot_watcher import FakeImds, serve

pytestmark = pytest.mark.django_db(transaction=True)


def test_demo(cloud, owner, plan, api, live_server, replanner):  # noqa: F811
    job, t0 = running(owner, plan, started_h_ago=1.5)
    print(f"\njob {job.pk}: 2 x g5.xlarge spot, $1/h, started {t0:%H:%M:%S}; nodes {job.instance_ids}")
    client = token_client(api, job)
    report_at(job, t0, 1)
    for iteration, minutes in ((100, 30), (200, 60)):
        client.post(
            f"/api/v1/jobs/{job.pk}/checkpoints/",
            {"iteration": iteration, "path": f"s3://bucket/ckpt/{iteration}.pt"},
            format="json",
        )
        job.checkpoints.filter(iteration=iteration).update(reported_at=t0 + minutes * MIN)
    report_at(job, t0 + 79 * MIN, 220)

    # the node's watcher: IMDS (stand-in) gives the notice, the watcher posts it to Srifty
    taken = job.instance_ids[1]
    FakeImds.asked, FakeImds.quiet, FakeImds.tokens = 0, 1, []
    import tests.launcher.test_spot_watcher as w

    w.INSTANCE = taken
    w.NOTICE = {"action": "terminate", "time": (t0 + 80 * MIN).strftime("%Y-%m-%dT%H:%M:%SZ")}
    imds, imds_url = serve(FakeImds)
    from launcher import jobs

    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        "SRIFTY_SERVER": live_server.url,
        "SRIFTY_JOB_ID": str(job.pk),
        "SRIFTY_TOKEN": jobs.derived_token(job),
        "SRIFTY_SPOT_NOTICE_FILE": "/tmp/spot-notice",
    }
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "profiler.agent.spotwatch",
            "--imds",
            imds_url,
            "--every",
            "0.05",
            "--max-polls",
            "20",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    imds.shutdown()
    print(f"node watcher on {taken}: {out.stdout.strip()}")

    print(f"watch pass at t0+78 min: {monitor.watch_job(job, now=t0 + 78 * MIN)}")
    job = Job.objects.get(pk=job.pk)
    row = JobInterruption.objects.get(job=job)
    new = row.replacement_ids[0]
    got = cloud.describe_instances(InstanceIds=[new])["Reservations"][0]["Instances"][0]
    print(
        f"replacement {new}: {got['InstanceType']}, {got.get('InstanceLifecycle', 'on-demand')}, rank {job.instance_ids.index(new)}; nodes now {job.instance_ids}"
    )
    code, _ = launch.rendezvous(job, new, now=t0 + 88 * MIN)  # the replacement boots and joins
    print(f"replacement's rendezvous at t0+88 min: HTTP {code}")
    report_at(job, t0 + 90 * MIN, 201, rank=1)
    print(f"watch pass at t0+91 min: {monitor.watch_job(job, now=t0 + 91 * MIN)}")
    row.refresh_from_db()
    print(
        f"interruption: cause {row.cause}, at t0+{(row.at - t0) / MIN:.0f} min, resume checkpoint iteration "
        f"{row.checkpoint.iteration}, lost {row.lost_min:.1f} min + restart {row.restart_min:.1f} min "
        f"(measured), ${row.cost_usd:.4f}; resumed at iteration {row.resumed_iteration}"
    )
    print("events:")
    for e in job.events.order_by("at", "pk"):
        print(f"  {e.at:%H:%M:%S} {e.kind:18} {e.message}")
    assert row.resumed_iteration == 201 and abs(row.cost_usd - 0.5) < 1e-9
