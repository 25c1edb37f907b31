"""Live profiling end to end on a non-default port, started the way ./run starts Srifty.

Nothing sets SITE_URL: the server (``srifty_web.serve``) and the task worker both get only
``PORT``, as ./run exports it, and the local agent that the worker starts must post its events
back to that port.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from profiler.agent.comm import free_port
from srifty_web.serve import site_url_for

ROOT = Path(__file__).resolve().parents[2]
TINY = {"kind": "compute", "model_spec": "examples.tiny_model:build", "input_shape": "3,16,16",
        "batch_sizes": "2,4", "iters": 2}  # fmt: skip


def _env(tmp_path: Path, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SITE_URL", "DATABASE_URL", "REDIS_URL")}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.update(PORT=str(port), SRIFTY_DATA_DIR=str(tmp_path), SRIFTY_LOCAL_CODE="1", PYTHONUNBUFFERED="1")
    return env


def _manage(env: dict[str, str], *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def _call(url: str, token: str, body: dict | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(
        url,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
        method="GET" if body is None else "POST",
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.status, json.loads(resp.read())


def _wait_up(url: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except urllib.error.HTTPError:
            return  # it answered
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"server at {url} never answered")


def test_site_url_follows_the_port_when_unset(tmp_path):
    port = free_port()
    out = _manage(
        _env(tmp_path, port), "shell", "-c", "from django.conf import settings; print(settings.SITE_URL)"
    )
    assert out.strip().splitlines()[-1] == f"http://127.0.0.1:{port}"


def test_serve_gives_its_workers_the_address_it_bound():
    assert site_url_for("0.0.0.0", 8123) == "http://127.0.0.1:8123"
    assert site_url_for("::1", 8123) == "http://[::1]:8123"
    assert site_url_for("10.0.0.5", 9000) == "http://10.0.0.5:9000"


@pytest.mark.timeout(300)
def test_live_profiling_works_on_a_non_default_port(tmp_path):
    port = free_port()
    assert port != 8000
    env = _env(tmp_path, port)
    _manage(env, "migrate", "--noinput", "-v0")
    token = (
        _manage(
            env,
            "shell",
            "-c",
            "from django.contrib.auth import get_user_model; from accounts.tokens import issue_api_token; "
            "u = get_user_model().objects.create_user('ann', 'ann@example.com', 'pw-123-long'); "
            "print(issue_api_token(u).key)",
        )
        .strip()
        .splitlines()[-1]
    )
    procs = [
        subprocess.Popen([sys.executable, "-m", "srifty_web.serve", "--port", str(port)], cwd=ROOT, env=env),
        subprocess.Popen([sys.executable, "manage.py", "db_worker", "--interval", "0.2"], cwd=ROOT, env=env),
    ]
    base = f"http://127.0.0.1:{port}/api/v1/profiling-runs/"
    try:
        _wait_up(base)
        status, run = _call(base, token, TINY)
        assert status == 201, run
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            _, run = _call(f"{base}{run['id']}/", token)
            if run["status"] in ("succeeded", "failed", "cancelled"):
                break
            time.sleep(0.5)
        assert run["status"] == "succeeded", run
        assert len(run["compute_samples"]) == 6
        # The agent's live events came over HTTP to this port (a run can also be completed from
        # the agent's result file when no post arrives, so samples alone prove nothing here).
        events = _manage(
            env,
            "shell",
            "-c",
            f"from profiler.models import RunEvent; print(RunEvent.objects.filter(run_id={run['id']}).count())",
        )
        assert int(events.strip().splitlines()[-1]) > 0
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
