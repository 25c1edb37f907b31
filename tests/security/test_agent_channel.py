"""Security probes of the agent channel: profiling-run tokens (``profiler.auth``) and job node
tokens (``launcher.api``), tried the way an attacker holding one token would.

A token sits in a VM's user-data, readable by every process on that VM (the user's model or
training code, whatever it pip-installs) and by anyone with ``ec2:DescribeInstanceAttribute``;
so each token must reach its own run/job only, die when that ends, and be unable to fill the
database or the viewers' websockets."""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from decimal import Decimal

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Permission
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.tokens import issue_api_token
from launcher import jobs
from launcher.models import Job, JobReport, JobStatus
from planner.app.models import PlanRecord
from profiler import actions
from profiler.models import ProfilingRun, RunEvent, RunStatus

pytestmark = pytest.mark.django_db


# --- helpers ------------------------------------------------------------------------------


def bearer(token: str, keyword: str = "Bearer") -> APIClient:
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"{keyword} {token}")
    return c


def events_url(run) -> str:
    return f"/api/v1/profiling-runs/{run.pk}/events/"


def progress(seq: int, **kw) -> dict:
    return {"seq": seq, "type": "progress", **kw}


def _group(count=2, gpus=1):
    return {
        "instance_type": "g5.xlarge",
        "market": "spot",
        "zone": "use1-az1",
        "count": count,
        "gpus_per_node": gpus,
        "gpu_model": "A10G",
        "price_per_hour": 0.5,
        "batch_per_node": [32] * count,
        "interruption_bucket": 1,
    }


def _option(rank=1, count=2, gpus=1):
    return {
        "rank": rank,
        "region": "us-east-1",
        "groups": [_group(count, gpus)],
        "global_batch": 32 * count,
        "nodes": count,
        "gpus": count * gpus,
        "hourly_usd": 0.5 * count,
        "total_usd": count,
        "time_h": 2.0,
        "time_p90_h": 2.4,
        "throughput_sps": 100.0,
        "iter_time_s": 0.5,
        "iter_time_p90_s": 0.6,
        "bottleneck": "compute",
        "why": "cheapest",
    }


@pytest.fixture
def plan(user):
    return PlanRecord.objects.create(
        owner=user,
        request={"total_samples": 64_000},
        status="solved",
        result={"plans": [_option(1), _option(2, count=1, gpus=4)]},
    )


@pytest.fixture
def launcher(user):
    user.user_permissions.add(Permission.objects.get(codename="add_job", content_type__app_label="launcher"))
    return type(user).objects.get(pk=user.pk)  # fresh permission cache


@pytest.fixture
def make_job(launcher, plan):
    """A running job (no EC2) with its node token: (job, token)."""

    def make(rank=1):
        job = jobs.create_job(launcher, plan, rank, "train.py", Decimal("50"), 10, confirm=True)
        token = jobs.issue_token(job)
        jobs.mark_launched(
            job,
            instance_ids=[f"i-{job.pk:04d}a", f"i-{job.pk:04d}b"],
            node_ips={f"i-{job.pk:04d}a": "10.0.0.5"},
        )
        return jobs.mark_running(job, "launched"), token

    return make


def reports_url(job) -> str:
    return f"/api/v1/jobs/{job.pk}/reports/"


def report_batch(seq=1, rank=0, n=1) -> dict:
    return {"seq": seq, "rank": rank, "reports": [{"iteration": i, "iter_time_s": 0.5} for i in range(n)]}


# --- 1. a token reaches its own run / job only ---------------------------------------------


def test_a_run_token_cannot_post_into_another_run(agent_run, make_run):
    run, token = agent_run
    other = make_run(status=RunStatus.RUNNING)
    actions.issue_token(other)
    resp = bearer(token).post(events_url(other), progress(1, phase="evil"), format="json")
    assert resp.status_code == 403
    assert not RunEvent.objects.filter(run=other).exists()
    other.refresh_from_db()
    assert other.phase == "" and other.last_seq == 0


def test_a_job_token_cannot_report_into_or_rendezvous_with_another_job(make_job):
    job, token = make_job()
    other, _ = make_job()
    assert bearer(token).post(reports_url(other), report_batch(), format="json").status_code == 403
    assert (
        bearer(token)
        .get(f"/api/v1/jobs/{other.pk}/rendezvous/", {"instance_id": other.instance_ids[0]})
        .status_code
        == 403
    )
    assert bearer(token).get(f"/api/v1/jobs/{other.pk}/agent.tar.gz").status_code == 403
    assert not JobReport.objects.filter(job=other).exists()


def test_a_profiling_token_is_refused_on_every_job_endpoint(agent_run, make_job):
    _, run_token = agent_run
    job, _ = make_job()
    client = bearer(run_token)
    assert client.post(reports_url(job), report_batch(), format="json").status_code == 401
    assert (
        client.get(f"/api/v1/jobs/{job.pk}/rendezvous/", {"instance_id": job.instance_ids[0]}).status_code
        == 401
    )
    assert client.get(f"/api/v1/jobs/{job.pk}/agent.tar.gz").status_code == 401


def test_a_job_token_is_refused_on_the_profiling_endpoints(agent_run, make_job):
    run, _ = agent_run
    _, job_token = make_job()
    client = bearer(job_token)
    assert client.post(events_url(run), progress(1), format="json").status_code == 401
    assert client.get("/api/v1/agent.tar.gz").status_code == 401
    assert not RunEvent.objects.filter(run=run).exists()


USER_ENDPOINTS = [
    ("get", "/api/v1/plans/"),
    ("get", "/api/v1/profiling-runs/"),
    ("get", "/api/v1/jobs/"),
    ("get", "/api/v1/instance-types/"),
    ("get", "/api/v1/prices/"),
    ("post", "/api/v1/plans/"),
    ("post", "/api/v1/profiling-runs/"),
    ("post", "/api/v1/jobs/preview/"),
    ("post", "/api/v1/jobs/"),
]


@pytest.mark.parametrize("keyword", ["Bearer", "Token"])
@pytest.mark.parametrize("method, url", USER_ENDPOINTS)
def test_agent_and_job_tokens_cannot_use_user_endpoints(agent_run, make_job, keyword, method, url):
    run, run_token = agent_run
    job, job_token = make_job()
    for token in (run_token, job_token):
        resp = (
            getattr(bearer(token, keyword), method)(url, {}, format="json")
            if method == "post"
            else bearer(token, keyword).get(url)
        )
        assert resp.status_code == 401, (token is run_token, resp.status_code)
    # the run's and the job's own user endpoints too
    for token in (run_token, job_token):
        assert bearer(token).get(f"/api/v1/profiling-runs/{run.pk}/").status_code == 401
        assert bearer(token).post(f"/api/v1/profiling-runs/{run.pk}/cancel/").status_code == 401
        assert bearer(token).get(f"/api/v1/jobs/{job.pk}/").status_code == 401
        assert bearer(token).post(f"/api/v1/jobs/{job.pk}/stop/").status_code == 401
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING


@pytest.mark.django_db(transaction=True)
async def test_agent_and_job_tokens_cannot_open_the_live_websockets(agent_run, make_job):
    from srifty_web.asgi import application

    run, run_token = agent_run
    job, job_token = await sync_to_async(make_job)()
    for path, token in (
        (f"/ws/profiling-runs/{run.pk}/", run_token),
        (f"/ws/jobs/{job.pk}/", job_token),
        (f"/ws/profiling-runs/{run.pk}/", job_token),
        (f"/ws/jobs/{job.pk}/", run_token),
    ):
        for keyword in ("Bearer", "Token"):
            headers = [
                (b"origin", b"http://127.0.0.1:8000"),
                (b"host", b"127.0.0.1:8000"),
                (b"authorization", f"{keyword} {token}".encode()),
            ]
            comm = WebsocketCommunicator(application, path, headers=headers)
            connected, code = await comm.connect(timeout=10)
            assert not connected and code == 4401, (path, keyword, code)
            await comm.disconnect()


# --- 2. a token dies with its run / job ----------------------------------------------------


@pytest.mark.parametrize("end", ["result", "error", "cancel", "fail"])
def test_a_run_token_dies_when_its_run_ends(agent_run, compute_profile, end):
    run, token = agent_run
    client = bearer(token)
    if end == "result":
        assert (
            client.post(
                events_url(run), {"seq": 1, "type": "result", "profile": compute_profile}, format="json"
            ).status_code
            == 201
        )
    elif end == "error":
        assert (
            client.post(
                events_url(run), {"seq": 1, "type": "error", "message": "boom"}, format="json"
            ).status_code
            == 201
        )
    elif end == "cancel":
        actions.cancel_run(run)
    else:
        actions.fail_run(run, "lost")
    run.refresh_from_db()
    assert run.finished and run.token_expires_at <= timezone.now()
    assert client.post(events_url(run), progress(5), format="json").status_code == 401
    assert client.get("/api/v1/agent.tar.gz").status_code == 401


def test_a_finished_runs_token_is_refused_even_if_its_expiry_was_pushed_back(agent_run):
    """A start task that re-issues the token after a cancel (check-then-act race in
    ``profiler.tasks.start_run``) pushes the expiry back to the deadline: the run's status, not
    only the expiry, must decide."""
    run, token = agent_run
    actions.cancel_run(run)
    ProfilingRun.objects.filter(pk=run.pk).update(token_expires_at=timezone.now() + timedelta(hours=1))
    assert bearer(token).post(events_url(run), progress(1), format="json").status_code == 401
    assert bearer(token).get("/api/v1/agent.tar.gz").status_code == 401
    assert not RunEvent.objects.filter(run=run).exists()


def test_a_cancelled_run_gets_no_new_token_and_is_not_started(agent_run, monkeypatch, settings):
    """The cause of the race above: a start re-delivered after a cancel issues nothing."""
    from profiler import providers, tasks

    settings.LOCAL_CODE_EXECUTION = True  # the run profiles examples.tiny_model locally
    run, _ = agent_run
    actions.cancel_run(run)
    with pytest.raises(actions.RunClosed):
        actions.issue_token(run)
    started = []
    monkeypatch.setattr(providers.LocalProvider, "start", lambda self, run, token: started.append(run.pk))
    assert tasks.start_run(ProfilingRun.objects.get(pk=run.pk)).startswith("not started")
    assert started == []


def test_an_expired_run_token_is_refused(agent_run):
    run, token = agent_run
    ProfilingRun.objects.filter(pk=run.pk).update(token_expires_at=timezone.now() - timedelta(seconds=1))
    assert bearer(token).post(events_url(run), progress(1), format="json").status_code == 401


def test_a_run_token_lives_no_longer_than_the_runs_hard_deadline(make_run):
    run = make_run(deadline_at=timezone.now() + timedelta(minutes=30))
    actions.issue_token(run, launch_key="srifty-run-x")
    run.refresh_from_db()
    assert run.token_expiry() == run.deadline_at == run.token_expires_at
    assert run.token_expires_at <= timezone.now() + timedelta(minutes=30)


@pytest.mark.parametrize("end", ["stop", "fail", "succeed"])
def test_a_job_token_dies_when_its_job_ends(make_job, end):
    job, token = make_job()
    {"stop": jobs.stop_job, "fail": jobs.fail_job, "succeed": jobs.succeed_job}[end](job, "done")
    client = bearer(token)
    assert client.post(reports_url(job), report_batch(), format="json").status_code == 401
    assert (
        client.get(f"/api/v1/jobs/{job.pk}/rendezvous/", {"instance_id": job.instance_ids[0]}).status_code
        == 401
    )
    assert client.get(f"/api/v1/jobs/{job.pk}/agent.tar.gz").status_code == 401


def test_a_finished_jobs_token_is_refused_even_if_its_expiry_was_pushed_back(make_job):
    """``jobs.mark_launched`` re-arms the expiry (cap + grace) when the first instances of a job
    that was stopped *during* its launch are recorded: the job's status must decide."""
    job, token = make_job()
    jobs.stop_job(job, "stopped while launching")
    Job.objects.filter(pk=job.pk).update(
        token_expires_at=timezone.now() + timedelta(hours=5), started_at=None
    )
    jobs.mark_launched(Job.objects.get(pk=job.pk), instance_ids=["i-late"], node_ips={})
    assert Job.objects.get(pk=job.pk).token_expires_at > timezone.now()  # the re-armed expiry
    client = bearer(token)
    assert client.post(reports_url(job), report_batch(), format="json").status_code == 401
    assert client.get(f"/api/v1/jobs/{job.pk}/agent.tar.gz").status_code == 401


def test_recording_a_late_launch_of_a_stopped_job_does_not_rearm_its_token(make_job):
    job, _ = make_job()
    jobs.stop_job(job, "stopped while launching")
    before = Job.objects.get(pk=job.pk)
    Job.objects.filter(pk=job.pk).update(started_at=None)
    jobs.mark_launched(Job.objects.get(pk=job.pk), instance_ids=["i-late"], node_ips={})
    assert Job.objects.get(pk=job.pk).token_expires_at == before.token_expires_at


def test_an_expired_job_token_is_refused(make_job):
    job, token = make_job()
    Job.objects.filter(pk=job.pk).update(token_expires_at=timezone.now() - timedelta(seconds=1))
    assert bearer(token).post(reports_url(job), report_batch(), format="json").status_code == 401


def test_a_job_token_lives_until_the_cap_plus_the_grace_and_no_longer(make_job):
    job, _ = make_job()
    job.refresh_from_db()
    assert job.token_expires_at == job.cap_at + jobs.TOKEN_GRACE
    assert job.token_expires_at <= job.started_at + timedelta(hours=job.max_hours) + jobs.TOKEN_GRACE


# --- malformed headers ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    [
        "Bearer",
        "Bearer ",
        "Bearer a b",
        "Bearer \t",
        "bearer abc",
        "BEARER abc",
        "Basic dXNlcjpwdw==",
        "Bearer " + "x" * 20_000,
        "Bearer \u00ff\u00fe",
        "Bearer ' OR 1=1 --",
        "Token",
        "Token a b",
    ],
)
def test_malformed_or_foreign_authorization_headers_get_401_never_500(agent_run, make_job, header):
    run, _ = agent_run
    job, _ = make_job()
    for method, url in (
        ("post", events_url(run)),
        ("post", reports_url(job)),
        ("get", "/api/v1/agent.tar.gz"),
        ("get", f"/api/v1/jobs/{job.pk}/agent.tar.gz"),
    ):
        c = APIClient()
        c.credentials(HTTP_AUTHORIZATION=header)
        resp = getattr(c, method)(
            url, {"seq": 1, "type": "progress"} if method == "post" else None, format="json"
        )
        assert resp.status_code == 401, (header[:20], url, resp.status_code)
    assert not RunEvent.objects.exists() and not JobReport.objects.exists()


def test_a_raw_non_utf8_header_is_a_401(agent_run):
    run, _ = agent_run
    c = APIClient()
    resp = c.post(
        events_url(run),
        {"seq": 1, "type": "progress"},
        format="json",
        HTTP_AUTHORIZATION=b"Bearer \xff\xfe\xfd".decode("latin-1"),
    )
    assert resp.status_code == 401


@pytest.mark.parametrize("length", ["abc", "-5", "1e3", "99999999999999999999999"])
def test_a_bogus_content_length_is_refused_not_a_500(agent_run, make_job, length):
    run, run_token = agent_run
    job, job_token = make_job()
    from django.test import RequestFactory
    from rest_framework.test import force_authenticate  # noqa: F401  (documents intent)

    from launcher.api import JobReportsView
    from profiler.api import AgentEventView

    rf = RequestFactory()
    for view, url, token, pk in (
        (AgentEventView, events_url(run), run_token, run.pk),
        (JobReportsView, reports_url(job), job_token, job.pk),
    ):
        request = rf.post(
            url, data=b"{}", content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
        )
        request.META["CONTENT_LENGTH"] = length
        resp = view.as_view()(request, pk=pk)
        assert resp.status_code in (400, 411, 413), (view.__name__, length, resp.status_code)


# --- 3. seq: replays and disorder ---------------------------------------------------------


def test_a_replayed_seq_changes_nothing_even_with_other_content(agent_run):
    run, token = agent_run
    c = bearer(token)
    assert (
        c.post(events_url(run), progress(1, phase="compute", fraction=0.2), format="json").status_code == 201
    )
    again = c.post(events_url(run), progress(1, phase="evil", fraction=0.9), format="json")
    assert again.status_code == 200 and again.json()["duplicate"] is True
    run.refresh_from_db()
    assert run.phase == "compute" and run.progress == pytest.approx(0.2)
    assert RunEvent.objects.get(run=run, seq=1).payload["phase"] == "compute"


def test_a_late_seq_is_stored_but_moves_neither_phase_nor_progress_back(agent_run):
    run, token = agent_run
    c = bearer(token)
    c.post(events_url(run), progress(5, phase="comm", fraction=0.5), format="json")
    assert (
        c.post(events_url(run), progress(3, phase="warmup", fraction=0.1), format="json").status_code == 201
    )
    run.refresh_from_db()
    assert (run.phase, run.progress, run.last_seq) == ("comm", 0.5, 5)


def test_a_seq_beyond_the_per_run_bound_is_refused(agent_run):
    """``(run, seq)`` is unique, so the largest seq bounds how many events one token can store."""
    from profiler.serializers import MAX_AGENT_SEQ

    run, token = agent_run
    resp = bearer(token).post(events_url(run), progress(MAX_AGENT_SEQ + 1), format="json")
    assert resp.status_code == 400 and "seq" in resp.json()
    assert bearer(token).post(events_url(run), progress(MAX_AGENT_SEQ), format="json").status_code == 201
    assert MAX_AGENT_SEQ <= 1_000_000


def test_job_report_replays_store_nothing_twice(make_job):
    job, token = make_job()
    c = bearer(token)
    assert c.post(reports_url(job), report_batch(seq=7, n=3), format="json").json()["stored"] == 3
    again = c.post(reports_url(job), report_batch(seq=8, n=3), format="json")  # overlaps 8, 9
    assert again.json()["stored"] == 1
    assert JobReport.objects.filter(job=job).count() == 4


def test_a_report_rank_outside_the_jobs_world_is_refused(make_job):
    """Rows are unique per (job, rank, seq): an unbounded rank lets one token store without end."""
    from launcher.api import RANKS_PER_GPU

    job, token = make_job()  # 2 nodes x 1 GPU; a few processes per GPU are allowed (CPU-only DDP)
    c = bearer(token)
    last = 2 * RANKS_PER_GPU - 1
    assert c.post(reports_url(job), report_batch(rank=last), format="json").status_code == 201
    resp = c.post(reports_url(job), report_batch(rank=last + 1), format="json")
    assert resp.status_code == 400 and "rank" in resp.json()
    assert not JobReport.objects.filter(job=job, rank=last + 1).exists()
    assert c.post(reports_url(job), report_batch(rank=999_999), format="json").status_code == 400


def test_a_multi_gpu_jobs_ranks_span_every_gpu(make_job):
    from launcher.api import RANKS_PER_GPU

    job, token = make_job(rank=2)  # 1 node x 4 GPUs
    c = bearer(token)
    assert (
        c.post(reports_url(job), report_batch(rank=4 * RANKS_PER_GPU - 1), format="json").status_code == 201
    )
    assert c.post(reports_url(job), report_batch(rank=4 * RANKS_PER_GPU), format="json").status_code == 400


# --- 4. what an event may carry -----------------------------------------------------------


def test_a_progress_event_cannot_carry_megabytes_of_extra_fields(agent_run):
    """Progress payloads are stored, replayed to every viewer (500 a snapshot) and broadcast."""
    run, token = agent_run
    resp = bearer(token).post(
        events_url(run), progress(1, message="x" * 9_000, phase="compute"), format="json"
    )
    assert resp.status_code == 413
    resp = bearer(token).post(events_url(run), progress(2, pad="x" * 200_000), format="json")
    assert resp.status_code in (201, 413)
    assert all(len(json.dumps(e.payload)) < 8_192 for e in RunEvent.objects.filter(run=run))


def test_unknown_event_fields_are_kept_only_as_a_few_short_scalars_and_never_spoof_the_run(
    agent_run, make_run, monkeypatch
):
    run, token = agent_run
    other = make_run()
    sent = []
    monkeypatch.setattr(actions, "broadcast", lambda r, message: sent.append(message))
    body = progress(
        1,
        phase="compute",
        batch_size=8,
        run=other.pk,
        status="succeeded",
        junk=[1] * 1000,
        nested={"a": 1},
        long="x" * 500,
        median_ms=2.0,
        **{"Bad-Key": 1, "<script>": 2},
        **{f"k{i}": i for i in range(40)},
    )
    resp = bearer(token).post(events_url(run), body, format="json")
    assert resp.status_code == 201
    payload = RunEvent.objects.get(run=run, seq=1).payload
    assert {"phase": "compute", "batch_size": 8, "median_ms": 2.0}.items() <= payload.items()
    assert not {"run", "status", "junk", "nested", "long", "Bad-Key", "<script>"} & set(payload)
    assert len(payload) <= 2 + 16
    progress_msgs = [m for m in sent if m["type"] == "progress"]
    assert progress_msgs and all(m["run"] == run.pk and "status" not in m for m in progress_msgs)


def test_the_fields_the_agent_sends_are_kept(agent_run):
    run, token = agent_run
    c = bearer(token)
    body = progress(1, phase="compute", batch_size=8, iteration=2, time_ms=12.5, fraction=0.25)
    assert c.post(events_url(run), body, format="json").status_code == 201
    body = progress(2, phase="batch_search", batch_size=16, fits=False, fraction=0.05)
    assert c.post(events_url(run), body, format="json").status_code == 201
    body = progress(3, phase="comm", size_bytes=1024, iteration=0, time_ms=0.5, fraction=0.5)
    assert c.post(events_url(run), body, format="json").status_code == 201
    sample = {"batch_size": 8, "phases": {"forward": {"times_ms": [1.0] * 1000}}}
    body = {
        "seq": 4,
        "type": "sample",
        "phase": "compute",
        "batch_size": 8,
        "sample": sample,
        "fraction": 0.6,
    }
    assert c.post(events_url(run), body, format="json").status_code == 201
    stored = {e.seq: e.payload for e in RunEvent.objects.filter(run=run)}
    assert stored[1] == {
        "phase": "compute",
        "batch_size": 8,
        "iteration": 2,
        "time_ms": 12.5,
        "fraction": 0.25,
    }
    assert stored[2]["fits"] is False and stored[3]["size_bytes"] == 1024
    assert stored[4]["sample"] == sample


def test_sample_events_are_bounded_in_size_and_number(agent_run, monkeypatch):
    from profiler import api

    run, token = agent_run
    c = bearer(token)
    huge = {"seq": 1, "type": "sample", "sample": {"times_ms": [1.5] * 200_000}}
    assert c.post(events_url(run), huge, format="json").status_code == 413
    monkeypatch.setattr(api, "MAX_SAMPLE_EVENTS", 3)
    for seq in range(2, 5):
        assert (
            c.post(
                events_url(run), {"seq": seq, "type": "sample", "sample": {"x": 1}}, format="json"
            ).status_code
            == 201
        )
    resp = c.post(events_url(run), {"seq": 9, "type": "sample", "sample": {"x": 1}}, format="json")
    assert resp.status_code == 409
    assert (
        c.post(events_url(run), {"seq": 4, "type": "sample", "sample": {"x": 1}}, format="json").status_code
        == 200
    )  # a retried post is still a duplicate
    assert RunEvent.objects.filter(run=run, type="sample").count() == 3


def test_a_result_over_the_event_cap_is_a_413_and_nothing_is_stored(agent_run):
    run, token = agent_run
    body = json.dumps({"seq": 1, "type": "result", "profile": {"pad": "x" * (9 * 1024 * 1024)}})
    resp = bearer(token).post(events_url(run), data=body, content_type="application/json")
    assert resp.status_code in (400, 413)
    run.refresh_from_db()
    assert run.profile is None and not run.finished


@pytest.mark.parametrize(
    "profile",
    [
        {},
        {"kind": "compute"},
        {"schema_version": 1, "kind": "comm"},
        [1, 2],
        "profile",
        None,
        {"schema_version": 1, "kind": "compute", "samples": [{"batch_size": -1}]},
    ],
)
def test_a_malformed_result_is_a_400_and_the_run_goes_on(agent_run, profile):
    run, token = agent_run
    resp = bearer(token).post(
        events_url(run), {"seq": 1, "type": "result", "profile": profile}, format="json"
    )
    assert resp.status_code == 400
    run.refresh_from_db()
    assert run.profile is None and not run.finished
    assert bearer(token).post(events_url(run), progress(2), format="json").status_code == 201


def test_a_result_that_claims_another_run_lands_on_the_tokens_own_run_only(
    agent_run, make_run, compute_profile
):
    run, token = agent_run
    other = make_run(status=RunStatus.RUNNING)
    doc = {**compute_profile, "run": other.pk, "run_id": other.pk}
    body = {"seq": 1, "type": "result", "profile": doc, "run": other.pk, "run_id": other.pk}
    assert bearer(token).post(events_url(run), body, format="json").status_code == 201
    run.refresh_from_db()
    other.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and run.compute_samples.exists()
    assert other.status == RunStatus.RUNNING and other.profile is None and not other.compute_samples.exists()


# --- 5. the raw token is stored and shown nowhere ------------------------------------------


def _every_stored_text() -> str:
    out: list[str] = []
    with connection.cursor() as cur:
        for table in connection.introspection.table_names():
            cur.execute(f'SELECT * FROM "{table}"')  # noqa: S608 - table names come from introspection
            out.extend(repr(row) for row in cur.fetchall())
    return "\n".join(out)


def test_tokens_are_stored_shown_and_logged_nowhere_in_plain_text(
    agent_run, make_job, user, caplog, compute_profile
):
    caplog.set_level(logging.DEBUG)
    run, run_token = agent_run
    job, job_token = make_job()
    bearer(run_token).post(events_url(run), progress(1, phase="compute"), format="json")
    bearer(job_token).post(reports_url(job), report_batch(), format="json")
    bearer(job_token).get(f"/api/v1/jobs/{job.pk}/rendezvous/", {"instance_id": job.instance_ids[0]})
    owner = APIClient()
    owner.credentials(HTTP_AUTHORIZATION=f"Token {issue_api_token(user).key}")
    shown = [
        owner.get(u).content.decode()
        for u in (
            "/api/v1/profiling-runs/",
            f"/api/v1/profiling-runs/{run.pk}/",
            "/api/v1/jobs/",
            f"/api/v1/jobs/{job.pk}/",
        )
    ]
    bearer(run_token).post(
        events_url(run), {"seq": 2, "type": "result", "profile": compute_profile}, format="json"
    )
    shown.append(owner.get(f"/api/v1/profiling-runs/{run.pk}/profile/").content.decode())
    stored = _every_stored_text()
    logged = caplog.text
    for token in (run_token, job_token):
        assert token not in stored
        assert all(token not in page for page in shown)
        assert token not in logged
    assert ProfilingRun.hash_token(run_token) in stored  # what is stored is the hash
