"""End to end: a run started over the API, a real agent subprocess posting to a live server,
and a browser-like websocket viewer on a real Redis channel layer (the layer that crosses
processes and threads, as in production behind several workers)."""

import os

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client
from rest_framework.test import APIClient

from profiler import tasks
from profiler.models import ProfilingRun, RunStatus
from srifty_web.asgi import application

REDIS_URL = os.environ.get("SRIFTY_TEST_REDIS_URL")
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.redis,
    pytest.mark.skipif(
        not REDIS_URL, reason="needs redis-server (./test starts one and sets SRIFTY_TEST_REDIS_URL)"
    ),
]


@pytest.fixture(autouse=True)
def _local_code(settings):
    """These runs profile examples.tiny_model (model code) in a local agent: the operator's
    single-user mode (SRIFTY_LOCAL_CODE=1, as ./run sets it)."""
    settings.LOCAL_CODE_EXECUTION = True


@pytest.fixture
def redis_layer(settings):
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            # Redis pub/sub channels span all its databases: under pytest-xdist each worker has
            # its own test database (so the same run ids), hence its own channel prefix.
            "CONFIG": {
                "hosts": [REDIS_URL],
                "prefix": f"asgi-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}",
            },
        }
    }


async def test_a_local_run_streams_progress_to_the_viewer_and_stores_samples(
    live_next, live_server, settings, redis_layer, user
):
    settings.SITE_URL = live_server.url
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}

    def start_over_api() -> tuple[int, bytes]:
        api = APIClient()
        api.force_authenticate(user)
        resp = api.post(
            "/api/v1/profiling-runs/",
            {
                "kind": "compute",
                "model_spec": "examples.tiny_model:build",
                "input_shape": "3,16,16",
                "batch_sizes": "2,4",
                "iters": 3,
            },
            format="json",
        )
        assert resp.status_code == 201, resp.content
        browser = Client()
        browser.force_login(user)
        return resp.json()["id"], f"sessionid={browser.cookies['sessionid'].value}".encode()

    run_id, cookie = await sync_to_async(start_over_api)()
    comm = WebsocketCommunicator(
        application,
        f"/ws/profiling-runs/{run_id}/",
        headers=[(b"origin", b"http://127.0.0.1:8000"), (b"host", b"127.0.0.1:8000"), (b"cookie", cookie)],
    )
    connected, _ = await comm.connect(timeout=10)
    assert connected
    assert (await live_next(comm, timeout=5))["status"] == "pending"

    run = await ProfilingRun.objects.aget(pk=run_id)
    assert (await sync_to_async(tasks.start_run)(run)).startswith("started")
    seen, times = [], []
    while True:
        msg = await live_next(comm, timeout=120)
        seen.append(msg["type"])
        if msg["type"] == "progress" and "time_ms" in msg:
            times.append(msg["time_ms"])
        if msg["type"] == "status" and msg["status"] in ("succeeded", "failed"):
            break
    await comm.disconnect()
    assert msg["status"] == "succeeded", msg.get("error")
    assert "progress" in seen and times and all(t > 0 for t in times)  # iteration times, live
    run = await ProfilingRun.objects.aget(pk=run_id)
    assert run.status == RunStatus.SUCCEEDED
    assert await run.compute_samples.acount() == 6
