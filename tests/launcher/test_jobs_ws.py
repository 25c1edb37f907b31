"""The job websocket, through the real ASGI application (session auth, origin check)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Group
from django.test import Client
from rest_framework.test import APIClient

from launcher import jobs
from srifty_web.asgi import application
from tests.support.jobs import g5_spot_option, may_launch, solved_plan

pytestmark = pytest.mark.django_db(transaction=True)

OPTION = g5_spot_option()


@pytest.fixture
def job_and_token(user, settings):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    owner = may_launch(user)
    plan = solved_plan(owner, OPTION, total_samples=6400)
    job = jobs.create_job(owner, plan, 1, "train.py", Decimal("10"), 5, confirm=True)
    token = jobs.issue_token(job)
    jobs.mark_launched(job, instance_ids=["i-0a", "i-0b"], node_ips={"i-0a": "10.0.0.1"})
    return jobs.mark_running(job, "launched"), token


def _cookie(user) -> bytes:
    c = Client()
    c.force_login(user)
    return f"sessionid={c.cookies['sessionid'].value}".encode()


async def _connect(job_id: int, cookie: bytes | None, origin: bytes = b"http://127.0.0.1:8000"):
    headers = [(b"origin", origin), (b"host", b"127.0.0.1:8000")]
    if cookie:
        headers.append((b"cookie", cookie))
    comm = WebsocketCommunicator(application, f"/ws/jobs/{job_id}/", headers=headers)
    connected, code = await comm.connect(timeout=10)
    return comm, connected, code


def _post(token: str, job_id: int, body: dict) -> int:
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return c.post(f"/api/v1/jobs/{job_id}/reports/", body, format="json").status_code


async def test_a_viewer_gets_the_snapshot_then_each_report_and_the_end(live_next, job_and_token, user):
    job, token = job_and_token
    assert (
        await sync_to_async(_post)(
            token, job.pk, {"seq": 1, "rank": 0, "reports": [{"iteration": 1, "iter_time_s": 0.55}]}
        )
        == 201
    )
    comm, connected, _ = await _connect(job.pk, await sync_to_async(_cookie)(user))
    assert connected
    snap = await live_next(comm, timeout=5)
    assert snap["type"] == "snapshot" and snap["status"] == "running" and snap["predicted_iter_s"] == 0.5
    assert snap["reports"] == [
        {"iteration": 1, "iter_time_s": 0.55, "rank": 0}
    ]  # a late viewer sees the past
    assert [e["kind"] for e in snap["events"]] == ["created", "launched"]

    assert (
        await sync_to_async(_post)(
            token,
            job.pk,
            {
                "seq": 2,
                "rank": 1,
                "reports": [{"iteration": 2, "iter_time_s": 0.61}, {"iteration": 3, "iter_time_s": 0.6}],
            },
        )
        == 201
    )
    assert await live_next(comm, timeout=5) == {
        "type": "report",
        "iteration": 2,
        "iter_time_s": 0.61,
        "rank": 1,
    }
    assert await live_next(comm, timeout=5) == {
        "type": "report",
        "iteration": 3,
        "iter_time_s": 0.6,
        "rank": 1,
    }
    assert (
        await sync_to_async(_post)(
            token, job.pk, {"seq": 2, "rank": 1, "reports": [{"iteration": 2, "iter_time_s": 0.61}]}
        )
        == 200
    )
    assert await comm.receive_nothing(timeout=0.3)  # a retried post is not broadcast again

    await sync_to_async(jobs.stop_job)(job, "stopped by alice")
    first, second = await live_next(comm, timeout=5), await live_next(comm, timeout=5)
    assert first == {"type": "event", "kind": "stopped", "message": "stopped by alice", "at": first["at"]}
    assert (
        second["type"] == "status"
        and second["status"] == "stopped"
        and second["reason"] == "stopped by alice"
    )
    await comm.disconnect()


async def test_anonymous_viewers_are_refused(job_and_token):
    job, _ = job_and_token
    _, connected, code = await _connect(job.pk, None)
    assert not connected and code == 4401


async def test_viewers_from_another_team_are_refused_and_teammates_are_not(
    job_and_token, user, django_user_model
):
    job, _ = job_and_token
    eve = await sync_to_async(django_user_model.objects.create_user)("eve", password="e-pass-12345")
    comm, connected, code = await _connect(job.pk, await sync_to_async(_cookie)(eve))
    assert not connected and code == 4403

    def join():
        team = Group.objects.create(name="ml")
        eve.groups.add(team)
        user.groups.add(team)

    await sync_to_async(join)()
    comm, connected, _ = await _connect(job.pk, await sync_to_async(_cookie)(eve))
    assert connected
    await comm.disconnect()


async def test_a_foreign_origin_is_refused(job_and_token, user):
    job, _ = job_and_token
    _, connected, _ = await _connect(
        job.pk, await sync_to_async(_cookie)(user), origin=b"http://evil.example"
    )
    assert not connected
