"""The run websocket, through the real ASGI application (auth middleware, origin check)."""

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client
from rest_framework.test import APIClient

from srifty_web.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


def _session_cookie(user) -> bytes:
    c = Client()
    c.force_login(user)
    return f"sessionid={c.cookies['sessionid'].value}".encode()


async def _connect(run_id: int, cookie: bytes | None, origin: bytes = b"http://127.0.0.1:8000"):
    headers = [(b"origin", origin), (b"host", b"127.0.0.1:8000")]
    if cookie:
        headers.append((b"cookie", cookie))
    comm = WebsocketCommunicator(application, f"/ws/profiling-runs/{run_id}/", headers=headers)
    connected, code = await comm.connect(timeout=10)
    return comm, connected, code


def _post(token: str, run_id: int, body: dict) -> int:
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return c.post(f"/api/v1/profiling-runs/{run_id}/events/", body, format="json").status_code


async def test_a_viewer_gets_the_snapshot_then_live_progress_and_the_end(
    live_next, agent_run, user, compute_profile
):
    run, token = agent_run
    cookie = await sync_to_async(_session_cookie)(user)
    assert (
        await sync_to_async(_post)(
            token,
            run.pk,
            {"seq": 1, "type": "progress", "phase": "compute", "fraction": 0.1, "time_ms": 12.5},
        )
        == 201
    )
    comm, connected, _ = await _connect(run.pk, cookie)
    assert connected
    snap = await live_next(comm, timeout=5)
    assert snap["type"] == "snapshot" and snap["status"] == "running"
    assert snap["events"][0]["time_ms"] == 12.5  # a late viewer sees what came before

    assert (
        await sync_to_async(_post)(
            token,
            run.pk,
            {
                "seq": 2,
                "type": "progress",
                "phase": "compute",
                "batch_size": 8,
                "fraction": 0.5,
                "time_ms": 20.0,
            },
        )
        == 201
    )
    live = await live_next(comm, timeout=5)
    assert live == {
        "type": "progress",
        "run": run.pk,
        "seq": 2,
        "phase": "compute",
        "batch_size": 8,
        "fraction": 0.5,
        "time_ms": 20.0,
    }
    assert (
        await sync_to_async(_post)(token, run.pk, {"seq": 3, "type": "result", "profile": compute_profile})
        == 201
    )
    end = await live_next(comm, timeout=5)
    assert end["type"] == "status" and end["status"] == "succeeded" and end["progress"] == 1.0
    await comm.disconnect()


async def test_a_duplicate_post_is_not_broadcast_twice(live_next, agent_run, user):
    run, token = agent_run
    cookie = await sync_to_async(_session_cookie)(user)
    comm, connected, _ = await _connect(run.pk, cookie)
    await live_next(comm, timeout=5)
    body = {"seq": 1, "type": "progress", "fraction": 0.2}
    assert await sync_to_async(_post)(token, run.pk, body) == 201
    messages = [await live_next(comm, timeout=5), await live_next(comm, timeout=5)]
    assert [m["type"] for m in messages] == ["status", "progress"]
    assert await sync_to_async(_post)(token, run.pk, body) == 200
    assert await comm.receive_nothing(timeout=0.3)
    await comm.disconnect()


async def test_anonymous_viewers_are_refused(agent_run):
    run, _ = agent_run
    comm, connected, code = await _connect(run.pk, None)
    assert not connected and code == 4401


async def test_a_viewer_from_another_team_is_refused(agent_run, django_user_model):
    run, _ = agent_run
    mallory = await sync_to_async(django_user_model.objects.create_user)("mallory", password="m-pass-12345")
    cookie = await sync_to_async(_session_cookie)(mallory)
    comm, connected, code = await _connect(run.pk, cookie)
    assert not connected and code == 4403


async def test_a_foreign_origin_is_refused(agent_run, user):
    run, _ = agent_run
    cookie = await sync_to_async(_session_cookie)(user)
    comm, connected, _ = await _connect(run.pk, cookie, origin=b"http://evil.example")
    assert not connected


async def test_fast_messages_are_coalesced_into_arrays_in_order_and_a_lone_one_comes_bare(agent_run, user):
    import asyncio
    import json

    from channels.layers import get_channel_layer

    from srifty_web.live import COALESCE_S

    run, _ = agent_run
    comm, connected, _ = await _connect(run.pk, await sync_to_async(_session_cookie)(user))
    assert connected
    await comm.receive_json_from(timeout=5)  # the snapshot
    layer = get_channel_layer()
    for seq in range(1, 21):  # a burst, far faster than one per COALESCE_S
        await layer.group_send(run.group_name, {"type": "run.message", "text": json.dumps({"seq": seq})})
    frames = []
    while sum(len(f) if isinstance(f, list) else 1 for f in frames) < 20:
        frames.append(await comm.receive_json_from(timeout=5))
    assert frames[0] == {"seq": 1}  # the first of a burst does not wait
    assert [m["seq"] for f in frames for m in (f if isinstance(f, list) else [f])] == list(range(1, 21))
    assert len(frames) <= 3  # 20 messages, at most one frame per window after the first

    await asyncio.sleep(COALESCE_S * 2)  # a quiet viewer sends the next message alone, at once
    await layer.group_send(run.group_name, {"type": "run.message", "text": json.dumps({"seq": 21})})
    assert await comm.receive_json_from(timeout=1) == {"seq": 21}
    await comm.disconnect()
