#!/usr/bin/env python
"""Load bench for the live server: API readers, websocket viewers and an agent, all at once.

Starts the real ASGI server as ./run does (``srifty_web.serve``: one daphne process, or
``--workers N``, which needs ``--redis``; ``--server uvicorn`` for comparison only, when
installed) on 127.0.0.1 and a free port, on a fresh
SQLite database in a temporary SRIFTY_DATA_DIR (migrated, the bundled catalog imported, a user
with a DRF token and a session, one running profiling run with an agent token), then for
``--duration`` seconds, concurrently:

* ``--clients`` API clients (threads, keep-alive ``http.client``) looping over
  ``GET /api/v1/instance-types/?limit=20`` and ``GET /api/v1/profiling-runs/``;
* ``--viewers`` websocket viewers of the run (one asyncio loop, the ``websockets`` client)
  logged in with the session cookie;
* an agent posting ``progress`` events at ``--rate`` events/s (paced; ``--posters`` threads keep
  the rate when a post takes longer than 1/rate; every event has its own seq).

* ``--plans`` (default 10) large plans posted at once (ResNet-50 on ImageNet, ``--plan-nodes``
  512, ``--plan-types`` 3, spot), solved by ``--plan-workers`` ``manage.py db_worker`` processes
  (the database task backend, as ./run) under an address-space limit (``--worker-memory-mb``,
  like ``ulimit -v``); each plan's progress is polled until it finishes (``--plan-timeout``).

It prints API throughput and p50/p99 latency (of the API clients only), events sent and accepted, events received per viewer
(min/median), lost events (accepted x viewers - received) and websocket connect failures, with
PASS/FAIL against the targets: 0 lost events at 50 events/s with 100 viewers on Redis, API p99
< 200 ms at 50 concurrent clients; for the plans, their POST statuses, final statuses and times,
and whether the server (and each worker) stayed up with every plan finished or failed cleanly.

Loopback only: the server binds 127.0.0.1 and ``--redis`` must point at a loopback address.
Bounded: every phase has a deadline and the whole run stops itself after ``--max-seconds``
(default 170); the server's process group and the temporary folder are removed on exit, Ctrl-C
and SIGTERM included.

    .venv/bin/python bench/load.py                       # in-memory channel layer
    .venv/bin/python bench/load.py --redis redis://127.0.0.1:56379/0
    .venv/bin/python bench/load.py --redis redis://127.0.0.1:56379/0 --workers 2   # what ./run does with REDIS_URL
    .venv/bin/python bench/load.py --redis ... --workers 2 --clients 0             # the fan-out target alone

``--think-ms`` paces each API client (a dashboard polls; 0, the default, is a closed loop, whose
latency is bounded below by clients / throughput: 50 clients at 170 req/s wait ~290 ms on average).
Paced clients start at a random phase and pause uniform in [0.5, 1.5] x think-ms, as independent
dashboards do; pauses in step would send all 50 requests in one burst each period.

``Server`` is also used by tests/reliability/test_faults.py (concurrent agent posts on SQLite).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import ipaddress
import json
import os
import queue
import random
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from profiler.agent.comm import free_port  # noqa: E402  (one free_port for the project)

API_PATHS = ("/api/v1/instance-types/?limit=20", "/api/v1/profiling-runs/")
TARGET_P99_MS = 200.0

SETUP = r"""
import json, os
from datetime import timedelta
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.sessions.backends.db import SessionStore
from django.utils import timezone
from accounts.tokens import issue_api_token
from profiler import actions
from profiler.models import ProfilingRun, RunStatus

user = get_user_model().objects.create_user("bench", password="bench-pass-12345")
session = SessionStore()
session[SESSION_KEY] = str(user.pk)
session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
session[HASH_SESSION_KEY] = user.get_session_auth_hash()
session.create()
run = ProfilingRun.objects.create(
    owner=user, kind="compute", model_spec="examples.tiny_model:build", input_shape="3,16,16",
    batch_sizes="2,4", status=RunStatus.RUNNING, started_at=timezone.now(),
    deadline_at=timezone.now() + timedelta(minutes=30),
)
print("BENCH " + json.dumps({
    "api_token": issue_api_token(user).key, "session": session.session_key,
    "run_id": run.pk, "agent_token": actions.issue_token(run),
}))
"""


def is_loopback(host: str) -> bool:
    if host in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (0..100), nearest-rank; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, int(round(q / 100 * len(ordered) + 0.5)) - 1))
    return ordered[k]


# --- the server ---------------------------------------------------------------------------


class Server:
    """daphne on 127.0.0.1 with a fresh SQLite database in ``workdir``; a context manager."""

    def __init__(
        self,
        workdir: Path,
        *,
        redis_url: str | None = None,
        catalog: bool = False,
        quiet: bool = True,
        throttle: str = "1000000/min",
        python: str = sys.executable,
        workers: int = 1,
        server: str = "daphne",
        plan_workers: int = 0,
        worker_memory_mb: int = 0,
    ) -> None:
        if redis_url and not is_loopback(urlsplit(redis_url).hostname or ""):
            raise SystemExit(f"--redis must be a loopback address, not {redis_url!r}")
        self.workdir, self.redis_url, self.catalog, self.quiet = Path(workdir), redis_url, catalog, quiet
        self.throttle, self.python = throttle, python
        if workers > 1 and not redis_url:
            raise SystemExit(
                "several workers need --redis (the in-process channel layer does not cross processes)"
            )
        self.workers, self.server = workers, server
        # plan_workers > 0: the database task backend and that many ``manage.py db_worker``
        # processes (as ./run starts one), each under an address-space limit of worker_memory_mb
        self.plan_workers, self.worker_memory_mb = plan_workers, worker_memory_mb
        self.worker_procs: list[subprocess.Popen] = []
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.api_token = self.session = self.agent_token = ""
        self.run_id = 0
        self.setup_s = 0.0

    # environment of every server-side process: SQLite in workdir, never DATABASE_URL
    def env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")
        }
        env.update(
            {
                "DJANGO_SETTINGS_MODULE": "srifty_web.settings",
                "SRIFTY_DATA_DIR": str(self.workdir),
                "DEBUG": "0",
                "LOG_LEVEL": "WARNING",
                "PYTHONUNBUFFERED": "1",
                "AGENT_THROTTLE_RATE": self.throttle,
                "TASKS_BACKEND": "django_tasks_db.DatabaseBackend"
                if self.plan_workers
                else "django_tasks.backends.dummy.DummyBackend",
                "PYTHONPATH": str(REPO),
            }
        )
        if self.redis_url:
            env["REDIS_URL"] = self.redis_url
        return env

    def _manage(self, *args: str, timeout: float = 120) -> str:
        out = subprocess.run(
            [self.python, "manage.py", *args],
            cwd=REPO,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if out.returncode != 0:
            raise RuntimeError(f"manage.py {args[0]} failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")
        return out.stdout

    def __enter__(self) -> Server:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        t0 = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._manage("migrate", "--noinput")
        if self.catalog:
            self._manage("import_catalog")
        line = next(ln for ln in self._manage("shell", "-c", SETUP).splitlines() if ln.startswith("BENCH "))
        seed = json.loads(line[6:])
        self.api_token, self.session = seed["api_token"], seed["session"]
        self.run_id, self.agent_token = seed["run_id"], seed["agent_token"]
        self.port = free_port()
        self.log_path = self.workdir / "daphne.log"
        with open(self.log_path, "wb") as log:
            # what ./run starts: the supervisor, whose daphne workers share one listening socket
            cmd = [
                self.python,
                "-m",
                "srifty_web.serve",
                "--port",
                str(self.port),
                "--workers",
                str(self.workers),
            ]
            if self.server == "uvicorn":  # for comparison only: not a dependency of Srifty
                cmd = [
                    self.python,
                    "-m",
                    "uvicorn",
                    "srifty_web.asgi:application",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--workers",
                    str(self.workers),
                    "--no-access-log",
                    "--log-level",
                    "warning",
                ]
            self.proc = subprocess.Popen(
                cmd,
                cwd=REPO,
                env=self.env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        for i in range(self.plan_workers):
            self.worker_procs.append(self._start_worker(i))
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                status, _ = self.get("/api/v1/profiling-runs/", timeout=5)
                if status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server did not answer within 60 s:\n{self.log_tail()}")
            time.sleep(0.2)
        self.setup_s = time.monotonic() - t0

    def _start_worker(self, index: int) -> subprocess.Popen:
        limit = self.worker_memory_mb * 1024 * 1024

        def limited() -> None:  # in the child: ``ulimit -v`` for this worker only
            if limit:
                import resource

                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

        with open(self.workdir / f"db_worker-{index}.log", "wb") as log:
            return subprocess.Popen(
                [self.python, "manage.py", "db_worker", "--interval", "0.2", "--no-startup-delay"],
                cwd=REPO,
                env=self.env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=limited,
            )

    def workers_alive(self) -> int:
        return sum(p.poll() is None for p in self.worker_procs)

    def worker_log_tail(self, limit: int = 1500) -> str:
        out = []
        for i in range(len(self.worker_procs)):
            try:
                out.append(
                    (self.workdir / f"db_worker-{i}.log").read_bytes()[-limit:].decode(errors="replace")
                )
            except OSError:
                pass
        return "\n".join(out)

    def log_tail(self, limit: int = 4000) -> str:
        try:
            return Path(self.log_path).read_bytes()[-limit:].decode(errors="replace")
        except (OSError, AttributeError):
            return ""

    def stop(self) -> None:
        workers, self.worker_procs = self.worker_procs, []
        for worker in workers:
            self._kill(worker)
        proc, self.proc = self.proc, None
        self._kill(proc)

    @staticmethod
    def _kill(proc: subprocess.Popen | None) -> None:
        if proc is None or proc.poll() is not None:
            return
        for sig, wait_s in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=wait_s)
                break
            except subprocess.TimeoutExpired:
                continue

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def get(self, path: str, timeout: float = 10) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request("GET", path, headers={"Authorization": f"Token {self.api_token}"})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def stored_seqs(self) -> list[int]:
        """Seqs of the run's stored events, read straight from the SQLite file."""
        with sqlite3.connect(self.workdir / "db.sqlite3", timeout=30) as db:
            rows = db.execute(
                "SELECT seq FROM profiler_runevent WHERE run_id = ? ORDER BY seq", (self.run_id,)
            )
            return [seq for (seq,) in rows]


# --- websocket viewers use the ``websockets`` package (requirements-dev.txt) ----------------


class WebSocketError(Exception):
    pass


async def ws_connect(port: int, path: str, cookie: str, timeout: float):
    """A websocket to the server, as a logged-in browser opens it (session cookie, same Origin)."""
    from websockets.asyncio.client import connect
    from websockets.typing import Origin

    return await connect(
        f"ws://127.0.0.1:{port}{path}",
        origin=Origin(f"http://127.0.0.1:{port}"),
        additional_headers={"Cookie": cookie},
        open_timeout=timeout,
        compression=None,  # the server offers none; a browser's deflate would only cost CPU here
        max_size=None,
        ping_interval=None,  # the run is short; no keep-alive pings in the figures
    )


# --- the load -----------------------------------------------------------------------------


@dataclass
class Viewer:
    connected: bool = False
    error: str = ""
    connect_s: float = 0.0
    seqs: set = field(default_factory=set)
    duplicates: int = 0
    out_of_order: int = 0
    frames: int = 0
    closed_by_server: bool = False


@dataclass
class PlanRun:
    """One large plan of the bench: its POST, then its progress polled until it finished."""

    index: int
    post_status: int = 0
    post_s: float = 0.0
    post_error: str = ""
    plan_id: int | None = None
    status: str = ""
    evaluated: int = 0
    estimated_total: int = 0
    error: str = ""
    started_s: float | None = None  # since the POST: when a worker took it
    finished_s: float | None = None  # since the POST
    polls: int = 0


@dataclass
class Results:
    mode: str
    duration_s: float = 0.0
    api: list = field(default_factory=list)  # (path, seconds, status)
    api_errors: dict = field(default_factory=dict)
    agent: list = field(default_factory=list)  # (seq, seconds, status)
    agent_window_s: float = 0.0
    agent_offered: int = 0
    agent_dropped: int = 0
    api_window_s: float = 0.0
    viewers: list = field(default_factory=list)
    plans: list = field(default_factory=list)  # PlanRun
    server_alive_after: bool = False
    workers_alive_after: int = 0
    drain_s: float = 0.0
    setup_s: float = 0.0
    server_exit: int | None = None
    server_cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    loadavg: tuple = ()


class Load:
    def __init__(self, server: Server, args) -> None:
        self.server, self.args = server, args
        self.stop = threading.Event()
        self.plans_stop = threading.Event()
        self.lock = threading.Lock()
        self.results = Results(mode=f"redis ({args.redis})" if args.redis else "in-memory channel layer")

    # API clients ------------------------------------------------------------------------
    def api_client(self, index: int, api_deadline: float) -> None:
        conn, n = None, index
        headers = {"Authorization": f"Token {self.server.api_token}"}
        local: list[tuple[str, float, int]] = []
        errors: dict[str, int] = {}
        # Independent dashboards do not poll in step: a random phase, then each pause uniform in
        # [0.5, 1.5] x think (seeded per client, so a rerun offers the same schedule).
        rng = random.Random(index)
        think_s = self.args.think_ms / 1000
        if think_s:
            self.stop.wait(rng.uniform(0, think_s))
        while not self.stop.is_set() and time.monotonic() < api_deadline:
            path = API_PATHS[n % len(API_PATHS)]
            n += 1
            t0 = time.perf_counter()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=30)
                conn.request("GET", path, headers=headers)
                resp = conn.getresponse()
                resp.read()
                status = resp.status
                if resp.getheader("connection", "").lower() == "close":
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException) as exc:
                status = 0
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                if conn is not None:
                    conn.close()
                conn = None
            local.append((path, time.perf_counter() - t0, status))
            if think_s:
                time.sleep(rng.uniform(0.5, 1.5) * think_s)
        if conn is not None:
            conn.close()
        with self.lock:
            self.results.api.extend(local)
            for k, v in errors.items():
                self.results.api_errors[k] = self.results.api_errors.get(k, 0) + v

    # large plans ------------------------------------------------------------------------
    def plan_body(self, index: int) -> dict:
        a = self.args
        return {
            "name": f"load bench {index}",
            "model": {"spec": "torchvision:resnet50", "input_shape": "3,224,224", "precision": "amp"},
            "samples_per_epoch": 1_281_167,  # ImageNet
            "epochs": 90,
            "objective": "cost",
            "deadline_hours": 24,
            "spot": True,
            "max_nodes": a.plan_nodes,
            "max_types": a.plan_types,
        }

    def plan_client(self, run: PlanRun, deadline: float) -> None:
        """POST one plan, then poll its progress (1/s) until it finished or ``deadline``."""
        headers = {"Authorization": f"Token {self.server.api_token}", "Content-Type": "application/json"}
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=30)
        t0 = time.perf_counter()
        try:
            conn.request(
                "POST", "/api/v1/plans/", body=json.dumps(self.plan_body(run.index)), headers=headers
            )
            resp = conn.getresponse()
            body = resp.read()
            run.post_status, run.post_s = resp.status, time.perf_counter() - t0
            data = json.loads(body or b"{}")
        except (OSError, http.client.HTTPException, ValueError) as exc:
            run.post_error = f"{type(exc).__name__}: {exc}"[:200]
            conn.close()
            return
        if run.post_status != 202:
            run.post_error = json.dumps(data)[:300]
            conn.close()
            return
        run.plan_id, run.status = data["id"], data["status"]
        while time.monotonic() < deadline and not self.plans_stop.is_set():
            self.plans_stop.wait(1.0)
            try:
                conn.request("GET", f"/api/v1/plans/{run.plan_id}/progress/", headers=headers)
                resp = conn.getresponse()
                msg = json.loads(resp.read())
            except (OSError, http.client.HTTPException, ValueError):
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=30)
                continue
            run.polls += 1
            run.status, run.error = msg.get("status", ""), msg.get("error", "")
            run.evaluated, run.estimated_total = msg.get("evaluated", 0), msg.get("estimated_total", 0)
            if run.started_s is None and run.status != "queued":
                run.started_s = time.perf_counter() - t0
            if msg.get("finished"):
                run.finished_s = time.perf_counter() - t0
                break
        conn.close()

    def start_plans(self) -> list[threading.Thread]:
        deadline = time.monotonic() + self.args.plan_timeout
        self.results.plans = [PlanRun(i) for i in range(self.args.plans)]
        threads = [
            threading.Thread(target=self.plan_client, args=(run, deadline), daemon=True)
            for run in self.results.plans
        ]
        for t in threads:
            t.start()
        return threads

    # the agent --------------------------------------------------------------------------
    def agent_poster(self, jobs: queue.Queue) -> None:
        conn = None
        headers = {"Authorization": f"Bearer {self.server.agent_token}", "Content-Type": "application/json"}
        path = f"/api/v1/profiling-runs/{self.server.run_id}/events/"
        local = []
        while True:
            item = jobs.get()
            if item is None:
                break
            seq, total = item
            body = json.dumps(
                {
                    "seq": seq,
                    "type": "progress",
                    "phase": "compute",
                    "batch_size": 8,
                    "fraction": round(seq / total, 6),
                    "time_ms": 12.5 + seq % 7,
                }
            ).encode()
            t0 = time.perf_counter()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=30)
                conn.request("POST", path, body=body, headers=headers)
                resp = conn.getresponse()
                resp.read()
                status = resp.status
            except (OSError, http.client.HTTPException):
                status = 0
                if conn is not None:
                    conn.close()
                conn = None
            local.append((seq, time.perf_counter() - t0, status))
        if conn is not None:
            conn.close()
        with self.lock:
            self.results.agent.extend(local)

    def agent(self) -> None:
        total = int(self.args.rate * self.args.duration)
        jobs: queue.Queue = queue.Queue()
        posters = [
            threading.Thread(target=self.agent_poster, args=(jobs,), daemon=True)
            for _ in range(max(1, self.args.posters))
        ]
        for t in posters:
            t.start()
        t0 = time.monotonic()
        for seq in range(1, total + 1):
            due = t0 + (seq - 1) / self.args.rate
            if self.stop.is_set() or due > t0 + self.args.duration:
                break
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            jobs.put((seq, total))
            self.results.agent_offered += 1
        # Past the duration (and 2 s of grace), events still waiting for a free poster are dropped
        # (a real agent's reporter replaces a waiting progress event by the newer one the same way).
        grace = time.monotonic() + 2
        while not jobs.empty() and time.monotonic() < grace:
            time.sleep(0.05)
        while True:
            try:
                jobs.get_nowait()
                self.results.agent_dropped += 1
            except queue.Empty:
                break
        for _ in posters:
            jobs.put(None)
        for t in posters:
            t.join(timeout=max(1.0, self.hard_deadline - time.monotonic()))
        self.results.agent_window_s = time.monotonic() - t0

    # websocket viewers ------------------------------------------------------------------
    async def viewer(self, v: Viewer, stop: asyncio.Event, connected: asyncio.Semaphore) -> None:
        from websockets.exceptions import ConnectionClosed, InvalidHandshake

        path = f"/ws/profiling-runs/{self.server.run_id}/"
        t0 = time.perf_counter()
        ws = None
        try:
            ws = await ws_connect(self.server.port, path, f"sessionid={self.server.session}", timeout=30)
            first = await asyncio.wait_for(ws.recv(), 30)
            if json.loads(first).get("type") != "snapshot":
                raise WebSocketError(f"no snapshot ({first[:80]!r})")
            v.connected, v.connect_s = True, time.perf_counter() - t0
        except (TimeoutError, OSError, InvalidHandshake, ConnectionClosed, WebSocketError, ValueError) as exc:
            v.error = f"{type(exc).__name__}: {exc}"[:200]
            connected.release()
            if ws is not None:
                await ws.close()
            return
        connected.release()
        last = 0
        stopper = asyncio.ensure_future(stop.wait())
        try:
            while True:
                recv = asyncio.ensure_future(ws.recv())
                done, _ = await asyncio.wait({recv, stopper}, return_when=asyncio.FIRST_COMPLETED)
                if recv not in done:
                    recv.cancel()
                    break
                try:
                    data = recv.result()
                except ConnectionClosed:
                    v.closed_by_server = True
                    break
                decoded = json.loads(data)
                v.frames += 1
                # one message, or several coalesced into an array (srifty_web/live.py)
                for msg in decoded if isinstance(decoded, list) else [decoded]:
                    if msg.get("type") != "progress":
                        continue
                    seq = msg["seq"]
                    if seq in v.seqs:
                        v.duplicates += 1
                    elif seq < last:
                        v.out_of_order += 1
                    v.seqs.add(seq)
                    last = max(last, seq)
        except (OSError, ValueError) as exc:
            v.error = f"after connect: {type(exc).__name__}: {exc}"[:200]
        finally:
            stopper.cancel()
            try:
                await asyncio.wait_for(ws.close(), 5)
            except (OSError, TimeoutError):
                pass

    def viewers_thread(self, ready: threading.Event, stop_flag: dict) -> None:
        async def main() -> None:
            stop = asyncio.Event()
            stop_flag["loop"], stop_flag["event"] = asyncio.get_running_loop(), stop
            sem = asyncio.Semaphore(0)
            views = [Viewer() for _ in range(self.args.viewers)]
            self.results.viewers = views
            tasks = [asyncio.ensure_future(self.viewer(v, stop, sem)) for v in views]

            async def all_connected() -> None:
                for _ in views:
                    await sem.acquire()
                ready.set()

            waiter = asyncio.ensure_future(all_connected())
            await asyncio.gather(*tasks, return_exceptions=True)
            waiter.cancel()
            ready.set()

        asyncio.run(main())

    # all of it --------------------------------------------------------------------------
    def run(self) -> Results:
        a = self.args
        proc = self.server.proc
        if proc is None:
            raise RuntimeError("the server is not running")
        cpu0, self_cpu0 = group_cpu_s(proc.pid), self_cpu_s()
        self.results.loadavg = os.getloadavg()
        self.hard_deadline = time.monotonic() + a.duration + a.drain + 60
        stop_flag: dict = {}
        ready = threading.Event()
        vt = threading.Thread(target=self.viewers_thread, args=(ready, stop_flag), daemon=True)
        vt.start()
        if not ready.wait(timeout=60):
            print("  (not every viewer connected within 60 s; going on)", file=sys.stderr)
        t0 = time.monotonic()
        api_deadline = t0 + a.duration
        clients = [
            threading.Thread(target=self.api_client, args=(i, api_deadline), daemon=True)
            for i in range(a.clients)
        ]
        for t in clients:
            t.start()
        plan_threads = self.start_plans() if a.plans else []
        if a.rate > 0:
            self.agent()
        else:
            time.sleep(a.duration)
        for t in clients:
            t.join(timeout=max(1.0, api_deadline + 35 - time.monotonic()))
        api_window_s = time.monotonic() - t0  # the last request started before the deadline
        server_cpu_s, client_cpu_s = group_cpu_s(proc.pid) - cpu0, self_cpu_s() - self_cpu0
        for t in plan_threads:  # plans still going when the API load ended get until --plan-timeout
            t.join(timeout=max(1.0, t0 + a.plan_timeout + 35 - time.monotonic()))
        self.plans_stop.set()
        try:
            self.results.server_alive_after = (
                proc.poll() is None and self.server.get("/api/v1/plans/")[0] == 200
            )
        except OSError:
            self.results.server_alive_after = False
        self.results.workers_alive_after = self.server.workers_alive()
        self.results.api_window_s = api_window_s
        self.results.duration_s = api_window_s
        self.results.server_cpu_s, self.results.client_cpu_s = server_cpu_s, client_cpu_s
        # let the fan-out finish: until every viewer has every accepted event, or --drain s
        accepted = {seq for seq, _, status in self.results.agent if status == 201}
        t1 = time.monotonic()
        while time.monotonic() - t1 < a.drain:
            live = [v for v in self.results.viewers if v.connected]
            if all(accepted <= v.seqs for v in live):
                break
            time.sleep(0.1)
        self.results.drain_s = time.monotonic() - t1
        if "loop" in stop_flag:
            try:
                stop_flag["loop"].call_soon_threadsafe(stop_flag["event"].set)
            except RuntimeError:  # the loop is already done (no viewers left)
                pass
        vt.join(timeout=15)
        self.stop.set()
        return self.results


# --- the report ---------------------------------------------------------------------------


def group_cpu_s(pgid: int) -> float:
    """CPU seconds of every live process in process group ``pgid`` (the server and its workers)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid:  # field 5 of stat: the process group
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def self_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def report(r: Results, args, server: Server) -> dict:
    api_ok = [(p, s) for p, s, st in r.api if st == 200]
    lat = [s * 1000 for _, s in api_ok]
    api_bad = len(r.api) - len(api_ok)
    p50, p99 = pct(lat, 50), pct(lat, 99)
    api_window = r.api_window_s or r.duration_s
    tput = len(api_ok) / api_window if api_window else 0.0
    sent = len(r.agent)
    by_status: dict[int, int] = {}
    for _, _, st in r.agent:
        by_status[st] = by_status.get(st, 0) + 1
    accepted = {seq for seq, _, st in r.agent if st == 201}
    post_lat = [s * 1000 for _, s, st in r.agent if st == 201]
    live = [v for v in r.viewers if v.connected]
    failures = [v for v in r.viewers if not v.connected]
    received = [len(v.seqs & accepted) for v in live]
    expected_total = len(accepted) * len(live)
    lost = expected_total - sum(received)
    connect_ms = [v.connect_s * 1000 for v in live]
    window = r.agent_window_s or r.duration_s
    accepted_rate = len(accepted) / window if window else 0.0
    rate_ok = accepted_rate >= 0.95 * args.rate  # the server took the events at the asked rate
    lost_ok = lost == 0 and not failures and len(live) == args.viewers and rate_ok
    on_target_load = args.redis and args.rate >= 50 and args.viewers >= 100
    p99_ok = p99 < TARGET_P99_MS and api_bad == 0

    print()
    print(
        f"Srifty load bench: {r.mode}; {server.server} x{server.workers} on 127.0.0.1:{server.port}, SQLite (WAL) in a temp dir, "
        f"{os.cpu_count()} CPUs; setup {server.setup_s:.1f} s"
    )
    load1 = f"{r.loadavg[0]:.1f}" if r.loadavg else "?"
    print(
        f"  CPU during the load: server {r.server_cpu_s:.1f} s over {r.duration_s:.1f} s "
        f"({100 * r.server_cpu_s / r.duration_s if r.duration_s else 0:.0f}% of one core), this bench "
        f"{r.client_cpu_s:.1f} s; machine load average {load1} at the start"
    )
    print(
        f"  load: {args.clients} API clients, {args.viewers} viewers, agent {args.rate:g} events/s "
        f"for {args.duration:g} s ({args.posters} poster threads), all at once"
    )
    print(
        f"API       {len(r.api)} requests in {api_window:.1f} s: {tput:.1f} req/s; "
        f"latency p50 {p50:.0f} ms, p99 {p99:.0f} ms; non-200 {api_bad}"
        + (f" {r.api_errors}" if r.api_errors else "")
    )
    for path in API_PATHS:
        pl = [s * 1000 for p, s in api_ok if p == path]
        print(f"          {path:<36} n={len(pl):<6} p50 {pct(pl, 50):6.0f} ms  p99 {pct(pl, 99):6.0f} ms")
    print(
        f"          target p99 < {TARGET_P99_MS:.0f} ms at {args.clients} concurrent clients: "
        f"{verdict(p99_ok)}" + ("" if args.clients >= 50 else " (fewer than 50 clients: not the target load)")
    )
    print(
        f"agent     {r.agent_offered} events offered at {args.rate:g}/s, {sent} sent "
        f"({sent / window if window else 0:.1f}/s achieved over {window:.1f} s), {r.agent_dropped} dropped "
        f"(posters behind); accepted {len(accepted)}; statuses {dict(sorted(by_status.items()))}; "
        f"post p50 {pct(post_lat, 50):.0f} ms, p99 {pct(post_lat, 99):.0f} ms"
    )
    print(
        f"viewers   {len(live)} connected, {len(failures)} connect failures"
        + (f" (e.g. {failures[0].error})" if failures else "")
        + f"; connect p50 {pct(connect_ms, 50):.0f} ms, p99 {pct(connect_ms, 99):.0f} ms"
    )
    if received:
        print(
            f"          events received per viewer: min {min(received)}, median {statistics.median(received):g}, "
            f"max {max(received)} (of {len(accepted)} accepted) in median "
            f"{statistics.median(v.frames for v in live):g} frames; duplicates {sum(v.duplicates for v in live)}, "
            f"out of seq order {sum(v.out_of_order for v in live)} (parallel posters); drain {r.drain_s:.1f} s"
        )
        errs = [v.error for v in live if v.error]
        if errs:
            print(f"          {len(errs)} viewers broke after connecting (e.g. {errs[0]})")
    print(
        f"lost      {lost} events (expected {len(accepted)} x {len(live)} = {expected_total}, received {sum(received)})"
        f"; target 0 lost at 50 events/s with 100 viewers on Redis: {verdict(lost_ok)}"
        + ("" if rate_ok else f" (the server accepted only {accepted_rate:.1f} events/s of {args.rate:g})")
        + ("" if on_target_load else " (not the target setup: needs --redis, rate >= 50, viewers >= 100)")
    )
    plans_ok = True
    if r.plans:
        plans_ok = report_plans(r, args, server)
    return {
        "mode": r.mode,
        "plans": [vars(p) for p in r.plans],
        "plans_pass": plans_ok,
        "server_alive_after": r.server_alive_after,
        "api_requests": len(r.api),
        "api_rps": tput,
        "api_p50_ms": p50,
        "api_p99_ms": p99,
        "api_non_200": api_bad,
        "events_offered": r.agent_offered,
        "events_dropped": r.agent_dropped,
        "events_sent": sent,
        "events_accepted": len(accepted),
        "accepted_per_s": accepted_rate,
        "agent_statuses": by_status,
        "viewers_connected": len(live),
        "connect_failures": len(failures),
        "received_min": min(received) if received else 0,
        "received_median": statistics.median(received) if received else 0,
        "lost": lost,
        "p99_pass": p99_ok,
        "lost_pass": lost_ok,
        "workers": server.workers,
        "think_ms": args.think_ms,
        "server_cpu_s": r.server_cpu_s,
        "duration_s": r.duration_s,
        "loadavg": r.loadavg,
    }


FINAL = ("solved", "infeasible", "failed", "cancelled")


def report_plans(r: Results, args, server: Server) -> bool:
    """The large plans: posted, finished or failed cleanly, and the server (and workers) up."""
    posts: dict[int, int] = {}
    for p in r.plans:
        posts[p.post_status] = posts.get(p.post_status, 0) + 1
    queued = [p for p in r.plans if p.plan_id is not None]
    finals: dict[str, int] = {}
    for p in queued:
        key = p.status if p.finished_s is not None else f"{p.status or '?'} (not finished)"
        finals[key] = finals.get(key, 0) + 1
    refused = [p for p in r.plans if p.post_status != 202]
    stuck = [p for p in queued if p.finished_s is None or p.status not in FINAL]
    done_s = [p.finished_s for p in queued if p.finished_s is not None]
    started_s = [p.started_s for p in queued if p.started_s is not None]
    clean_refusals = all(400 <= p.post_status < 500 for p in refused)  # a 400 naming the field
    limit = f", address space <= {server.worker_memory_mb} MB each" if server.worker_memory_mb else ""
    print(
        f"plans     {len(r.plans)} posted at once: ResNet-50 ImageNet, max_nodes {args.plan_nodes}, "
        f"max_types {args.plan_types}, spot; {server.plan_workers} db_worker(s){limit}"
    )
    print(
        f"          POST statuses {dict(sorted(posts.items()))}, p50 {pct([p.post_s * 1000 for p in r.plans], 50):.0f} ms"
        + (f"; refused: {refused[0].post_error[:160]}" if refused else "")
    )
    if queued:
        print(
            f"          final statuses {dict(sorted(finals.items()))}; taken by a worker after "
            f"p50 {pct(started_s, 50):.1f} s; finished after p50 {pct(done_s, 50):.1f} s, max "
            f"{max(done_s) if done_s else float('nan'):.1f} s (of --plan-timeout {args.plan_timeout:g} s)"
        )
        evaluated = [p.evaluated for p in queued if p.status == "solved"]
        if evaluated:
            print(
                f"          configurations evaluated per solved plan: median {statistics.median(evaluated):,.0f}"
            )
        errors = sorted({p.error.splitlines()[0][:160] for p in queued if p.error and p.status != "solved"})
        for e in errors[:3]:
            print(f"          error: {e}")
    ok = r.server_alive_after and not stuck and (bool(queued) or clean_refusals)
    print(
        f"          server up after the load: {'yes' if r.server_alive_after else 'NO'}; db_workers alive "
        f"{r.workers_alive_after}/{server.plan_workers}; plans not finished: {len(stuck)}; "
        f"target: server up and every plan finished or failed cleanly: {verdict(ok)}"
    )
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=50, help="concurrent API clients (default 50)")
    ap.add_argument("--viewers", type=int, default=100, help="websocket viewers of the run (default 100)")
    ap.add_argument(
        "--rate", type=float, default=50, help="agent events per second (default 50; 0: no agent)"
    )
    ap.add_argument("--duration", type=float, default=20, help="seconds of load (default 20, at most 60)")
    ap.add_argument("--posters", type=int, default=4, help="agent threads keeping the rate (default 4)")
    ap.add_argument(
        "--drain", type=float, default=10, help="seconds to wait for the fan-out to finish (default 10)"
    )
    ap.add_argument(
        "--think-ms", type=float, default=0, help="pause between an API client's requests (default 0)"
    )
    ap.add_argument("--redis", metavar="URL", help="use the Redis channel layer at URL (loopback only)")
    ap.add_argument(
        "--workers",
        type=int,
        default=1,
        help="daphne worker processes behind srifty_web.serve (default 1; more need --redis)",
    )
    ap.add_argument(
        "--server",
        choices=("daphne", "uvicorn"),
        default="daphne",
        help="ASGI server (uvicorn only for comparison, when installed)",
    )
    ap.add_argument(
        "--max-seconds", type=float, default=170, help="the whole bench stops after this (default 170)"
    )
    ap.add_argument(
        "--plans", type=int, default=10, help="large plans posted at once while the clients run (default 10)"
    )
    ap.add_argument("--plan-nodes", type=int, default=512, help="their max_nodes (default 512)")
    ap.add_argument("--plan-types", type=int, default=3, help="their max_types (default 3)")
    ap.add_argument(
        "--plan-workers", type=int, default=1, help="db_worker processes solving them (default 1, as ./run)"
    )
    ap.add_argument(
        "--worker-memory-mb",
        type=int,
        default=4000,
        help="address-space limit of each db_worker, like ulimit -v (default 4000; 0: none)",
    )
    ap.add_argument(
        "--plan-timeout", type=float, default=120, help="seconds the plans get to finish (default 120)"
    )
    ap.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (database, daphne.log)")
    args = ap.parse_args(argv)
    args.duration = min(max(args.duration, 1.0), 60.0)
    args.clients, args.viewers = min(max(args.clients, 0), 500), min(max(args.viewers, 0), 1000)
    args.rate = min(max(args.rate, 0.0), 1000.0)
    if args.redis and not is_loopback(urlsplit(args.redis).hostname or ""):
        ap.error(f"--redis must point at a loopback address (127.0.0.1, localhost, ::1), not {args.redis!r}")

    def on_signal(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    # Explicit handlers: a shell starts background jobs with SIGINT ignored, and Python then
    # never raises KeyboardInterrupt (the watchdog below relies on SIGINT too).
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    # The whole bench is bounded: past --max-seconds the main thread is interrupted (and cleans up).
    watchdog = threading.Timer(args.max_seconds, lambda: os.kill(os.getpid(), signal.SIGINT))
    watchdog.daemon = True
    watchdog.start()
    tmp = Path(tempfile.mkdtemp(prefix="srifty-bench-"))
    started = time.monotonic()
    try:
        with Server(
            tmp / "data",
            redis_url=args.redis,
            catalog=True,
            workers=args.workers,
            server=args.server,
            plan_workers=args.plan_workers if args.plans else 0,
            worker_memory_mb=args.worker_memory_mb,
        ) as server:
            print(
                f"server ready on 127.0.0.1:{server.port} after {server.setup_s:.1f} s "
                f"(migrate, catalog import, daphne start)",
                flush=True,
            )
            load = Load(server, args)
            try:
                results = load.run()
            finally:
                load.stop.set()
            if server.proc is not None and server.proc.poll() is not None:
                print(f"daphne died during the run:\n{server.log_tail()}")
            figures = report(results, args, server)
            tail = server.log_tail(1500).strip()
            if any(w in tail for w in ("Traceback", "ERROR", "Error")):
                print(f"--- daphne log (tail) ---\n{tail}")
            if server.workers_alive() < server.plan_workers:
                print(f"--- db_worker logs (tail) ---\n{server.worker_log_tail()}")
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=1, default=str))
        print(f"total {time.monotonic() - started:.1f} s")
        return 0 if figures["p99_pass"] and figures["lost_pass"] and figures["plans_pass"] else 1
    except KeyboardInterrupt as exc:
        print(f"\ninterrupted ({exc or 'Ctrl-C'}); cleaning up", file=sys.stderr)
        return 130
    finally:
        watchdog.cancel()
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
