"""Fixtures for the profiling-agent tests: a real HTTP server on 127.0.0.1 that records posts."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:  # the agent is a plain package run from the repo root
    sys.path.insert(0, str(REPO_ROOT))


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict


@dataclass
class EventServer:
    url: str
    received: list[Received] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)  # returned first, one per request, then 200
    attempts: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def events(self) -> list[dict]:
        with self.lock:
            return [r.body for r in self.received]


@pytest.fixture
def event_server() -> Iterator[EventServer]:
    state = EventServer(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            length = int(self.headers.get("Content-Length", 0))
            raw = self.rfile.read(length)
            with state.lock:
                state.attempts += 1
                status = state.statuses.pop(0) if state.statuses else 200
                if status == 200:
                    state.received.append(Received(self.path, dict(self.headers), json.loads(raw)))
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}/api/agent/events"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def closed_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens: the server is down."""
    from profiler.agent.comm import free_port

    return f"http://127.0.0.1:{free_port()}/events"
