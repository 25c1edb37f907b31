"""Fault injection: worker restarts, AWS errors and throttling, duplicate and out-of-order agent
posts, concurrent writers on SQLite.

tests/profiler/test_local_runs.py already covers a killed agent and a lost result post; this file
covers what happens around them: tasks delivered again after a worker restart (at-least-once
delivery), PIDs reused by another process, the window between an EC2 launch and the moment the run
records it, AWS answering errors or throttling at each step, and agents whose posts arrive twice,
late or at the same time.

Stand-in agents are ``python -c 'sleep' profiler.agent <out file>``: ``LocalProvider`` recognises
its agent by that command line, and they cost nothing to start (no torch).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests
from botocore.awsrequest import AWSResponse
from botocore.config import Config
from django.core.cache import cache
from rest_framework.test import APIClient

from cloud import CloudError, ec2, session
from profiler import actions, tasks
from profiler.models import ProfilingRun, RunEvent, RunStatus
from profiler.providers import LocalProvider

REGION = "us-east-1"


@pytest.fixture
def dummy_tasks(settings):
    """Queued tasks are kept in memory (DummyBackend.results), never run."""
    from django_tasks import task_backends

    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    backend = task_backends["default"]
    backend.clear()
    return backend


def _queued(backend, task) -> list[list]:
    """Arguments of every queued call of ``task``."""
    return [list(r.args) for r in backend.results if r.task.func is task.func]


@pytest.fixture
def stand_in(tmp_path):
    """Start stand-in agents; every one still running is killed at the end."""
    procs: list[subprocess.Popen] = []

    def start(cmdline_tail: list[str]) -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(120)", *cmdline_tail],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _fake_agent(stand_in, run) -> subprocess.Popen:
    out, _ = LocalProvider().paths(run)
    return stand_in(["profiler.agent", "compute", "--out", str(out)])


def _kill(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def _bearer(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def _post(client: APIClient, run_id: int, body: dict):
    return client.post(f"/api/v1/profiling-runs/{run_id}/events/", body, format="json")


# --- (a) worker restarts: tasks delivered again -------------------------------------------


@pytest.mark.django_db
def test_a_watch_redelivered_after_a_worker_restart_resumes_watching_a_live_agent(
    make_run, stand_in, dummy_tasks
):
    run = make_run(status=RunStatus.RUNNING)
    agent = _fake_agent(stand_in, run)
    ProfilingRun.objects.filter(pk=run.pk).update(pid=agent.pid)
    actions.record_event(run, {"seq": 1, "type": "progress", "phase": "compute", "fraction": 0.3})
    actions.record_event(
        run, {"seq": 2, "type": "sample", "batch_size": 4, "phase": "forward", "median_ms": 3.0}
    )

    # The worker that ran the watch chain died; the queue hands its task to a new worker, which
    # knows nothing but the run id. The agent (its own session) outlived the worker.
    assert tasks.watch_run_task.call(run.pk) == "watching"
    assert _queued(dummy_tasks, tasks.watch_run_task) == [[run.pk]]  # the chain goes on
    assert ProfilingRun.objects.get(pk=run.pk).status == RunStatus.RUNNING

    _kill(agent)  # now the agent dies too, mid-run: the next delivery ends the run
    assert tasks.watch_run_task.call(run.pk) == "failed"
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and "agent process exited before reporting a result" in run.error
    assert list(RunEvent.objects.filter(run=run).values_list("seq", "type")) == [
        (1, "progress"),
        (2, "sample"),
    ]
    assert run.progress == pytest.approx(0.3)  # partial progress kept
    assert _queued(dummy_tasks, tasks.watch_run_task) == [[run.pk]]  # no watch after the end


@pytest.mark.django_db
def test_a_watch_delivered_twice_changes_nothing_twice(
    make_run, stand_in, dummy_tasks, django_capture_on_commit_callbacks
):
    run = make_run(status=RunStatus.RUNNING)
    agent = _fake_agent(stand_in, run)
    ProfilingRun.objects.filter(pk=run.pk).update(pid=agent.pid)
    _kill(agent)
    with django_capture_on_commit_callbacks(execute=True):
        first = tasks.watch_run_task.call(run.pk)
        error = ProfilingRun.objects.get(pk=run.pk).error
        second = tasks.watch_run_task.call(run.pk)  # the same task, delivered again
    assert (first, second) == ("failed", RunStatus.FAILED)
    run.refresh_from_db()
    assert run.error == error  # first writer wins, the reason is not overwritten
    assert len(_queued(dummy_tasks, tasks.stop_run_task)) == 1  # one stop, not one per delivery
    assert _queued(dummy_tasks, tasks.watch_run_task) == []


@pytest.mark.django_db
def test_a_watch_after_a_reboot_does_not_mistake_a_reused_pid_for_the_agent(make_run, stand_in, dummy_tasks):
    """After a host restart the run's PID may belong to another process: the run fails cleanly
    (no agent), and stopping it does not kill that stranger."""
    run = make_run(status=RunStatus.RUNNING)
    stranger = stand_in(["not-our-agent"])
    ProfilingRun.objects.filter(pk=run.pk).update(pid=stranger.pid)
    assert tasks.watch_run_task.call(run.pk) == "failed"
    assert "agent process exited" in ProfilingRun.objects.get(pk=run.pk).error
    assert tasks.stop_run_task.call(run.pk) == "stopped"
    time.sleep(0.2)
    assert stranger.poll() is None  # still alive


@pytest.mark.django_db
@pytest.mark.parametrize(
    "status",
    [RunStatus.STARTING, RunStatus.RUNNING, RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED],
)
def test_a_start_redelivered_for_a_run_that_is_not_pending_launches_nothing(make_run, monkeypatch, status):
    run = make_run(pid=4242)
    token = actions.issue_token(run)  # while it could still start: a finished run gets no token
    ProfilingRun.objects.filter(pk=run.pk).update(status=status)
    before = ProfilingRun.objects.get(pk=run.pk)
    launched = []
    monkeypatch.setattr(LocalProvider, "start", lambda self, run, token: launched.append(run.pk) or 1)
    assert tasks.start_run_task.call(run.pk) == f"run {run.pk} is {status}; not starting it again"
    after = ProfilingRun.objects.get(pk=run.pk)
    assert launched == []
    assert (after.status, after.pid, after.token_hash) == (before.status, before.pid, before.token_hash)
    assert after.token_matches(token)  # no new token was issued: a live agent keeps reporting


@pytest.mark.django_db
def test_two_workers_handed_the_same_start_launch_one_agent(make_run, monkeypatch, dummy_tasks, settings):
    """Duplicate delivery of start_run_task: the second one finds the run no longer pending."""
    settings.LOCAL_CODE_EXECUTION = True  # the run profiles examples.tiny_model locally
    run = make_run()
    launched = []
    monkeypatch.setattr(LocalProvider, "start", lambda self, run, token: launched.append(run.pk) or 999_999)
    assert tasks.start_run_task.call(run.pk).startswith("started")
    assert tasks.start_run_task.call(run.pk).endswith("not starting it again")
    assert launched == [run.pk]
    assert ProfilingRun.objects.get(pk=run.pk).status == RunStatus.STARTING


# --- (b) AWS errors and throttling --------------------------------------------------------


def _error(code: str, message: str, status: int = 400) -> AWSResponse:
    body = (
        f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors>"
        "<RequestID>fault</RequestID></Response>"
    ).encode()

    class Raw:
        def stream(self, *args, **kwargs):
            yield body

    return AWSResponse("https://ec2.fault", status, {}, Raw())


@pytest.fixture
def hooks(aws_hooks, monkeypatch):
    """(event, handler) pairs registered on every boto3 client ``cloud`` creates, with botocore's
    retry decisions kept but its sleeps skipped, and 3 attempts instead of 9."""
    monkeypatch.setattr(session, "RETRY", Config(retries={"max_attempts": 2, "mode": "adaptive"}))
    monkeypatch.setattr("botocore.retries.standard.ExponentialBackoff.delay_amount", lambda self, ctx: 0)
    monkeypatch.setattr(
        "botocore.retries.bucket.TokenBucket.acquire", lambda self, amount=1, block=True: True
    )
    return aws_hooks


@pytest.fixture
def ec2_run(make_run, aws, dummy_tasks, settings):
    settings.SITE_URL = "https://srifty.example.com"
    return make_run(provider="ec2", instance_type="g5.xlarge", region=REGION, market="spot", device="cuda")


def _live_instances(run) -> list[ec2.InstanceState]:
    return [
        s
        for s in ec2.find_managed(REGION, {"srifty:run-id": str(run.pk)})
        if s.state in ("pending", "running")
    ]


def _always(code: str, message: str, status: int, attempts: list[int]):
    def before_send(request, **kwargs):
        attempts[0] += 1
        return _error(code, message, status)

    return before_send


@pytest.mark.django_db
@pytest.mark.parametrize(
    "operation, code, message, status",
    [
        ("DescribeImages", "RequestLimitExceeded", "Request limit exceeded.", 503),
        ("RunInstances", "RequestLimitExceeded", "Request limit exceeded.", 503),
        (
            "RunInstances",
            "InsufficientInstanceCapacity",
            "We currently do not have sufficient g5.xlarge capacity.",
            500,
        ),
        ("RunInstances", "UnauthorizedOperation", "You are not authorized to perform this operation.", 403),
        ("DescribeInstances", "InternalError", "An internal error has occurred.", 500),
    ],
)
def test_an_ec2_start_that_aws_refuses_fails_the_run_with_the_reason_and_leaves_no_instance(
    ec2_run, hooks, operation, code, message, status
):
    attempts = [0]
    hooks.append((f"before-send.ec2.{operation}", _always(code, message, status, attempts)))
    assert tasks.start_run_task.call(ec2_run.pk) == "failed to start"
    hooks.clear()  # AWS answers again, for the checks below
    run = ProfilingRun.objects.get(pk=ec2_run.pk)
    assert run.status == RunStatus.FAILED and not run.instance_ids
    assert run.error.startswith("could not start the agent: ec2.") and f"{code}: {message}" in run.error
    assert attempts[0] >= 1
    assert _live_instances(run) == []
    assert not run.token_matches("anything") and run.token_expires_at <= run.finished_at


def _lost_response(attempts: list[int]):
    """RunInstances reaches EC2 (moto launches the instance) but the answer never comes back:
    every attempt, the first included, ends in a 500 for botocore."""

    def before_send(request, **kwargs):
        attempts[0] += 1
        if attempts[0] == 1:
            headers = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in request.headers.items()}
            requests.post(request.url, data=request.body, headers=headers, timeout=30)
        return _error("InternalError", "An internal error has occurred.", 500)

    return before_send


@pytest.mark.django_db
def test_a_launch_whose_answer_is_lost_fails_the_run_and_its_stop_removes_the_instance(ec2_run, hooks):
    from fleet import reconcile

    attempts = [0]
    hooks.append(("before-send.ec2.RunInstances", _lost_response(attempts)))
    assert tasks.start_run_task.call(ec2_run.pk) == "failed to start"
    hooks.clear()
    run = ProfilingRun.objects.get(pk=ec2_run.pk)
    assert run.status == RunStatus.FAILED and "InternalError" in run.error and not run.instance_ids
    (orphan,) = _live_instances(run)  # EC2 did launch it
    tasks.stop_run_task.call(run.pk)  # what fail_run queues: it finds the instance by its run tag (B11)
    assert _live_instances(run) == []
    report = reconcile.reconcile(regions=[REGION])
    assert orphan.id not in [a.instance_id for a in report.terminated]  # nothing left for the reconciler


@pytest.mark.django_db
def test_bug_b11_stopping_a_failed_launch_terminates_the_instance_it_did_start(ec2_run, hooks):
    attempts = [0]
    hooks.append(("before-send.ec2.RunInstances", _lost_response(attempts)))
    tasks.start_run_task.call(ec2_run.pk)
    hooks.clear()
    tasks.stop_run_task.call(ec2_run.pk)
    assert _live_instances(ec2_run) == []


class WorkerDied(BaseException):
    """The worker process is killed: nothing in the task catches this."""


def _user_data_token(instance_id: str) -> str:
    import base64

    cli = session.client("ec2", REGION)
    value = cli.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")["UserData"]["Value"]
    script = base64.b64decode(value).decode()
    found = re.search(r"^SRIFTY_TOKEN=(.*)$", script, re.M)
    assert found, "no SRIFTY_TOKEN in the user data"
    return shlex.split(found.group(1))[0]


@pytest.mark.django_db
def test_a_start_redelivered_after_dying_between_launch_and_record_launches_no_second_instance(
    ec2_run, monkeypatch
):
    real = actions.mark_starting

    def die(*args, **kwargs):
        raise WorkerDied

    monkeypatch.setattr(actions, "mark_starting", die)
    with pytest.raises(WorkerDied):
        tasks.start_run_task.call(ec2_run.pk)
    assert ProfilingRun.objects.get(pk=ec2_run.pk).status == RunStatus.PENDING  # nothing recorded
    (first,) = _live_instances(ec2_run)

    monkeypatch.setattr(actions, "mark_starting", real)
    assert tasks.start_run_task.call(ec2_run.pk).startswith("started")  # the queue delivers it again
    run = ProfilingRun.objects.get(pk=ec2_run.pk)
    assert run.status == RunStatus.STARTING and run.instance_ids == [first.id]  # the same VM (client token)
    assert [s.id for s in _live_instances(run)] == [first.id]


@pytest.mark.django_db
def test_bug_b13_the_reused_instance_can_still_report(ec2_run, monkeypatch):
    real = actions.mark_starting
    monkeypatch.setattr(actions, "mark_starting", lambda *a, **k: (_ for _ in ()).throw(WorkerDied()))
    with pytest.raises(WorkerDied):
        tasks.start_run_task.call(ec2_run.pk)
    monkeypatch.setattr(actions, "mark_starting", real)
    tasks.start_run_task.call(ec2_run.pk)
    run = ProfilingRun.objects.get(pk=ec2_run.pk)
    assert run.token_matches(_user_data_token(run.instance_ids[0]))


@pytest.mark.django_db
def test_bug_b14_a_throttled_poll_keeps_the_watch_going(ec2_run, hooks, dummy_tasks):
    assert tasks.start_run_task.call(ec2_run.pk).startswith("started")
    dummy_tasks.results.clear()
    attempts = [0]
    hooks.append(
        (
            "before-send.ec2.DescribeInstances",
            _always("RequestLimitExceeded", "Request limit exceeded.", 503, attempts),
        )
    )
    try:
        tasks.watch_run_task.call(ec2_run.pk)
    finally:
        queued = _queued(dummy_tasks, tasks.watch_run_task)
    assert queued == [[ec2_run.pk]]


@pytest.mark.django_db
def test_a_throttled_poll_does_not_change_the_run(ec2_run, hooks, dummy_tasks):
    """What happens today under B14: the task errors, and the run is left as it was."""
    tasks.start_run_task.call(ec2_run.pk)
    attempts = [0]
    hooks.append(
        (
            "before-send.ec2.DescribeInstances",
            _always("RequestLimitExceeded", "Request limit exceeded.", 503, attempts),
        )
    )
    with pytest.raises(CloudError, match="RequestLimitExceeded"):
        tasks.watch_run(ProfilingRun.objects.get(pk=ec2_run.pk))
    hooks.clear()
    run = ProfilingRun.objects.get(pk=ec2_run.pk)
    assert run.status == RunStatus.STARTING and len(_live_instances(run)) == 1


# --- (c) duplicate and out-of-order agent posts -------------------------------------------


@pytest.fixture
def agent(make_run):
    cache.clear()
    run = make_run()
    return run, _bearer(actions.issue_token(run))


@pytest.mark.django_db
def test_posts_arriving_out_of_order_are_each_stored_once_and_progress_never_goes_back(agent):
    run, client = agent
    events = {
        1: {"phase": "batch-search", "fraction": 0.1},
        2: {"phase": "compute", "fraction": 0.4},
        3: {"phase": "compute", "fraction": 0.7},
        4: {"phase": "buckets", "fraction": 0.9},
    }
    for seq in (3, 1, 4, 2, 3, 1):
        resp = _post(client, run.pk, {"seq": seq, "type": "progress", **events[seq]})
        assert resp.status_code in (200, 201), resp.content
    run.refresh_from_db()
    assert list(RunEvent.objects.filter(run=run).values_list("seq", flat=True)) == [1, 2, 3, 4]
    assert run.last_seq == 4 and run.progress == pytest.approx(0.9) and run.status == RunStatus.RUNNING
    assert [e.payload["fraction"] for e in RunEvent.objects.filter(run=run)] == [0.1, 0.4, 0.7, 0.9]


@pytest.mark.django_db
def test_bug_b12_a_late_progress_event_does_not_move_the_phase_back(agent):
    run, client = agent
    _post(client, run.pk, {"seq": 2, "type": "progress", "phase": "buckets", "fraction": 0.9})
    _post(client, run.pk, {"seq": 1, "type": "progress", "phase": "batch-search", "fraction": 0.1})
    assert ProfilingRun.objects.get(pk=run.pk).phase == "buckets"


@pytest.mark.django_db
def test_a_retried_post_with_the_same_seq_keeps_the_first_and_says_duplicate(agent):
    run, client = agent
    assert (
        _post(client, run.pk, {"seq": 1, "type": "sample", "batch_size": 4, "median_ms": 2.0}).status_code
        == 201
    )
    resp = _post(client, run.pk, {"seq": 1, "type": "sample", "batch_size": 4, "median_ms": 99.0})
    assert resp.status_code == 200 and resp.json() == {"seq": 1, "duplicate": True}
    assert RunEvent.objects.get(run=run, seq=1).payload["median_ms"] == 2.0


@pytest.mark.django_db
def test_a_result_posted_twice_succeeds_once_and_later_posts_are_refused(agent, compute_profile):
    run, client = agent
    _post(client, run.pk, {"seq": 1, "type": "progress", "fraction": 0.5})
    assert _post(client, run.pk, {"seq": 2, "type": "result", "profile": compute_profile}).status_code == 201
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and run.compute_samples.count() == 6
    # the agent timed out waiting for the answer and retries; then a straggler progress post
    assert _post(client, run.pk, {"seq": 2, "type": "result", "profile": compute_profile}).status_code == 401
    assert _post(client, run.pk, {"seq": 3, "type": "progress", "fraction": 0.9}).status_code == 401
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and run.compute_samples.count() == 6 and run.progress == 1.0
    assert list(RunEvent.objects.filter(run=run).values_list("seq", flat=True)) == [1, 2]


@pytest.mark.django_db
def test_a_duplicate_error_after_a_result_does_not_fail_a_succeeded_run(agent, compute_profile):
    run, _ = agent
    assert actions.record_event(run, {"seq": 5, "type": "result", "profile": compute_profile}) is True
    assert (
        actions.record_event(run, {"seq": 5, "type": "error", "message": "late"}) is False
    )  # same seq: duplicate
    with pytest.raises(actions.RunClosed):
        actions.record_event(run, {"seq": 6, "type": "error", "message": "late"})
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and run.error == ""


# --- (d) concurrent writers ---------------------------------------------------------------


def _load_bench():
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "bench" / "load.py"
    spec = importlib.util.spec_from_file_location("srifty_bench_load", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_two_agents_threads_posting_to_one_run_on_sqlite_lose_nothing(tmp_path):
    """The production setup: daphne on a file SQLite database (WAL, IMMEDIATE transactions),
    two threads posting interleaved seqs (and each other's, as retries) to the same run."""
    bench = _load_bench()
    with bench.Server(tmp_path / "srv", redis_url=None, quiet=True) as server:
        per_thread, statuses, lock = 150, [], threading.Lock()

        def poster(offset: int) -> None:
            session = requests.Session()
            session.headers["Authorization"] = f"Bearer {server.agent_token}"
            for i in range(per_thread):
                seq = 1 + 2 * i + offset
                for s in (seq, seq - 1 if seq > 1 else seq):  # its own event, then a retry of the other's
                    r = session.post(
                        server.url(f"/api/v1/profiling-runs/{server.run_id}/events/"),
                        json={"seq": s, "type": "progress", "fraction": min(1.0, s / 400)},
                        timeout=30,
                    )
                    with lock:
                        statuses.append((s, r.status_code))

        threads = [threading.Thread(target=poster, args=(k,)) for k in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        seqs = server.stored_seqs()
    codes = {code for _, code in statuses}
    assert codes <= {200, 201}, sorted({(s, c) for s, c in statuses if c not in (200, 201)})[:10]
    assert seqs == list(range(1, 2 * per_thread + 1))  # every seq once, none lost
    assert sum(1 for _, c in statuses if c == 201) == 2 * per_thread


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(
    not os.environ.get("DATABASE_URL", "").startswith("postgres"),
    reason="the SQLite test database is a shared-cache in-memory one, unlike production: "
    "the daphne test above covers SQLite",
)
def test_two_threads_posting_to_one_run_through_the_api_lose_nothing(make_run):
    from django.db import connection

    run = make_run()
    token = actions.issue_token(run)
    cache.clear()
    per_thread, statuses, lock = 60, [], threading.Lock()

    def poster(offset: int) -> None:
        try:
            client = _bearer(token)
            for i in range(per_thread):
                seq = 1 + 2 * i + offset
                for s in (seq, seq + 1 - 2 * offset):
                    code = _post(client, run.pk, {"seq": s, "type": "progress", "fraction": 0.1}).status_code
                    with lock:
                        statuses.append(code)
        finally:
            connection.close()

    threads = [threading.Thread(target=poster, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert set(statuses) <= {200, 201}
    assert list(RunEvent.objects.filter(run=run).values_list("seq", flat=True)) == list(
        range(1, 2 * per_thread + 1)
    )
    assert statuses.count(201) == 2 * per_thread
