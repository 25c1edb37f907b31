"""The node's spot watcher (``profiler.agent.spotwatch``) against a local HTTP server standing in
for IMDS (IMDSv2 token, instance id, 404 until the notice) and one standing in for Srifty."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from profiler.agent import spotwatch

INSTANCE = "i-0abc1234def567890"
NOTICE = {"action": "terminate", "time": "2026-12-06T01:02:03Z"}


class FakeImds(BaseHTTPRequestHandler):
    """IMDSv2: a token from PUT /latest/api/token, then GETs that carry it; the spot notice
    answers 404 for the first ``quiet`` asks."""

    quiet = 2
    asked = 0
    life_cycle = ""  # meta-data/instance-life-cycle: 404 when empty
    tokens: list[str] = []

    def log_message(self, *args):
        pass

    def do_PUT(self):
        assert self.path == "/latest/api/token"
        assert int(self.headers["X-aws-ec2-metadata-token-ttl-seconds"]) > 0
        type(self).tokens.append("tok")
        self._send(200, "tok")

    def do_GET(self):
        if self.headers.get("X-aws-ec2-metadata-token") != "tok":
            return self._send(401, "")
        if self.path == "/latest/meta-data/instance-id":
            return self._send(200, INSTANCE)
        if self.path == "/latest/meta-data/spot/instance-action":
            type(self).asked += 1
            if type(self).asked <= type(self).quiet:
                return self._send(404, "")
            return self._send(200, json.dumps(NOTICE))
        if self.path == "/latest/meta-data/instance-life-cycle" and type(self).life_cycle:
            return self._send(200, type(self).life_cycle)
        return self._send(404, "")

    def _send(self, code, body):
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class FakeSrifty(BaseHTTPRequestHandler):
    posts: list[tuple[str, dict, str]] = []

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).posts.append((self.path, body, self.headers.get("Authorization", "")))
        self.send_response(201)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")


def serve(handler):
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def servers():
    FakeImds.asked, FakeImds.quiet, FakeImds.tokens, FakeImds.life_cycle = 0, 2, [], ""
    FakeSrifty.posts = []
    imds, imds_url = serve(FakeImds)
    srifty, srifty_url = serve(FakeSrifty)
    yield imds_url, srifty_url
    imds.shutdown()
    srifty.shutdown()


def test_it_reads_only_a_well_formed_notice():
    assert spotwatch.parse_notice(json.dumps(NOTICE)) == spotwatch.Notice("terminate", NOTICE["time"])
    assert spotwatch.parse_notice('{"action": "stop", "time": "2026-12-06T01:02:03Z"}').action == "stop"
    for bad in ("", "<html>", "[]", '{"action": "reboot", "time": "x"}', '{"action": "terminate"}'):
        assert spotwatch.parse_notice(bad) is None


def test_it_polls_until_the_notice_then_reports_it_and_leaves_a_notice_file(servers, tmp_path):
    imds_url, srifty_url = servers
    notice_file = tmp_path / "spot-notice"
    got = spotwatch.watch(
        spotwatch.Imds(imds_url),
        srifty_url,
        "7",
        "job-token",
        every_s=0.01,
        notice_file=str(notice_file),
        max_polls=10,
    )
    assert got == spotwatch.Notice("terminate", NOTICE["time"])
    assert FakeImds.asked == 3 and FakeImds.tokens == ["tok"]  # 404, 404, notice; one IMDSv2 token
    (path, body, auth) = FakeSrifty.posts[0]
    assert len(FakeSrifty.posts) == 1
    assert path == "/api/v1/jobs/7/interruptions/" and auth == "Bearer job-token"
    assert body == {"instance_id": INSTANCE, **NOTICE}
    assert json.loads(notice_file.read_text()) == NOTICE


def test_without_a_notice_it_reports_nothing(servers):
    imds_url, srifty_url = servers
    FakeImds.quiet = 100
    assert spotwatch.watch(spotwatch.Imds(imds_url), srifty_url, "7", "t", every_s=0.01, max_polls=3) is None
    assert FakeSrifty.posts == [] and FakeImds.asked == 3


def test_it_runs_as_a_module_on_a_bare_python(servers, tmp_path):
    """What the node script runs: ``python -m profiler.agent.spotwatch`` with the job's env."""
    imds_url, srifty_url = servers
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": str(root),
        "SRIFTY_SERVER": srifty_url,
        "SRIFTY_JOB_ID": "12",
        "SRIFTY_TOKEN": "tok12",
        "SRIFTY_SPOT_NOTICE_FILE": str(tmp_path / "notice"),
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "profiler.agent.spotwatch",
            "--imds",
            imds_url,
            "--every",
            "0.01",
            "--max-polls",
            "5",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "terminate at 2026-12-06T01:02:03Z; reported (HTTP 201)" in done.stdout
    assert FakeSrifty.posts[0][0] == "/api/v1/jobs/12/interruptions/"
    assert "torch" not in done.stderr


def test_the_notice_it_posts_is_what_the_server_takes(db, user):
    """The watcher's body goes through the server's serializer unchanged."""
    from launcher.serializers import SpotNoticeSerializer

    data = SpotNoticeSerializer(data={"instance_id": INSTANCE, **NOTICE})
    assert data.is_valid(), data.errors
    assert data.validated_data["action"] == "terminate"


@pytest.mark.parametrize(("life_cycle", "polls"), [("on-demand", 0), ("scheduled", 0), ("spot", 3), ("", 3)])
def test_it_watches_only_where_imds_does_not_say_on_demand(servers, monkeypatch, capsys, life_cycle, polls):
    """The same node script runs on spot and on-demand nodes: on one IMDS calls on-demand the
    watcher ends at once; on spot, or when IMDS does not say, it polls for the notice."""
    imds_url, srifty_url = servers
    FakeImds.life_cycle, FakeImds.quiet = life_cycle, 100
    for name, value in {"SRIFTY_SERVER": srifty_url, "SRIFTY_JOB_ID": "7", "SRIFTY_TOKEN": "t"}.items():
        monkeypatch.setenv(name, value)
    rc = spotwatch.main(["--imds", imds_url, "--every", "0.01", "--max-polls", "3"])
    assert FakeImds.asked == polls and FakeSrifty.posts == []
    assert rc == (0 if polls == 0 else 1)
    assert ("not a spot instance" in capsys.readouterr().out) is (polls == 0)
