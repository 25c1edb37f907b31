"""Watch this EC2 node's spot interruption notice and tell Srifty (standard library only).

    python -m profiler.agent.spotwatch &      # in a job node's script, before the training

AWS gives a spot instance two minutes' notice: IMDS answers
``GET /latest/meta-data/spot/instance-action`` with ``{"action": "terminate", "time":
"2026-12-06T01:02:03Z"}`` (404 until then). The watcher polls it every ``--every`` seconds
(IMDSv2: a session token from ``PUT /latest/api/token``, renewed before it expires), and on a
notice

* posts ``{"instance_id", "action", "time"}`` to ``{SRIFTY_SERVER}/api/v1/jobs/{SRIFTY_JOB_ID}/
  interruptions/`` with the job token (retried a few times: there are two minutes), so the server
  launches a replacement without waiting for the node to vanish;
* touches ``SRIFTY_SPOT_NOTICE_FILE`` (default ``/opt/srifty/spot-notice``) with the notice in
  it, so a training loop that looks for the file can write one last checkpoint;
* exits (one notice per node).

The node script starts it on every node (one script serves the whole cluster); on an instance
that IMDS says is not spot (``meta-data/instance-life-cycle``: ``on-demand``, ``scheduled``) it
exits at once, since no notice can come. When IMDS does not say, it watches anyway: the notice
path answers 404 there, which costs one local request every ``--every`` seconds.

It runs as its own process so a busy or hung training loop cannot delay the notice. No Django,
no third-party import: it runs on a bare VM beside the training.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

IMDS = "http://169.254.169.254"
TOKEN_TTL_S = 21600


@dataclass(frozen=True)
class Notice:
    action: str
    time: str


def parse_notice(body: str) -> Notice | None:
    """The notice in IMDS's answer, or None for anything else (a bad body is no notice)."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    action, when = doc.get("action"), doc.get("time")
    if action not in ("terminate", "stop", "hibernate") or not isinstance(when, str):
        return None
    return Notice(action, when)


class Imds:
    """IMDSv2 reads: a session token, then GETs with it."""

    def __init__(self, base: str = IMDS, timeout_s: float = 2.0) -> None:
        self.base = base.rstrip("/")
        self.timeout_s = timeout_s
        self._token = ""
        self._token_at = 0.0

    def _fresh_token(self) -> str:
        if not self._token or time.monotonic() - self._token_at > TOKEN_TTL_S / 2:
            req = urllib.request.Request(
                f"{self.base}/latest/api/token",
                method="PUT",
                headers={"X-aws-ec2-metadata-token-ttl-seconds": str(TOKEN_TTL_S)},
            )
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                self._token = resp.read().decode()
            self._token_at = time.monotonic()
        return self._token

    def get(self, path: str) -> tuple[int, str]:
        """``(HTTP status, body)``; 0 when IMDS could not be reached."""
        try:
            req = urllib.request.Request(
                f"{self.base}/latest/meta-data/{path}",
                headers={"X-aws-ec2-metadata-token": self._fresh_token()},
            )
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            if exc.code == 401:  # the token expired early: get a new one next time
                self._token = ""
            return exc.code, ""
        except (urllib.error.URLError, OSError):
            return 0, ""


def is_spot(imds: Imds) -> bool | None:
    """Whether IMDS says this instance is spot; None when it does not say (unreachable, 404)."""
    code, body = imds.get("instance-life-cycle")
    if code != 200 or not body.strip():
        return None
    return body.strip() == "spot"


def report(server: str, job_id: str, token: str, instance_id: str, notice: Notice, attempts: int = 5) -> int:
    """Post the notice to Srifty; the HTTP status (0: never reached)."""
    url = f"{server.rstrip('/')}/api/v1/jobs/{job_id}/interruptions/"
    body = json.dumps({"instance_id": instance_id, "action": notice.action, "time": notice.time}).encode()
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    status = 0
    for attempt in range(attempts):
        try:
            req = urllib.request.Request(url, data=body, headers=headers, method="POST")
            with urllib.request.urlopen(req, timeout=10) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            status = exc.code
            if exc.code < 500 and exc.code != 429:
                return status
        except (urllib.error.URLError, OSError):
            status = 0
        time.sleep(min(8.0, 0.5 * 2**attempt))
    return status


def watch(
    imds: Imds,
    server: str,
    job_id: str,
    token: str,
    *,
    every_s: float = 5.0,
    notice_file: str = "",
    max_polls: int | None = None,
) -> Notice | None:
    """Poll until a notice comes (then report it and return it), or ``max_polls`` run out."""
    instance_id = ""
    polls = 0
    while max_polls is None or polls < max_polls:
        polls += 1
        if not instance_id:
            code, body = imds.get("instance-id")
            instance_id = body.strip() if code == 200 else ""
        code, body = imds.get("spot/instance-action")
        notice = parse_notice(body) if code == 200 else None
        if notice is not None:
            if notice_file:
                try:
                    with open(notice_file, "w") as f:
                        json.dump({"action": notice.action, "time": notice.time}, f)
                except OSError:
                    pass
            status = report(server, job_id, token, instance_id, notice)
            print(f"srifty spotwatch: {notice.action} at {notice.time}; reported (HTTP {status})", flush=True)
            return notice
        time.sleep(every_s)
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m profiler.agent.spotwatch", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--imds", default=IMDS, help="the instance metadata service (tests: a local server)")
    ap.add_argument("--every", type=float, default=5.0, help="seconds between polls")
    ap.add_argument("--max-polls", type=int, default=None)
    args = ap.parse_args(argv)
    env = os.environ
    server, job_id, token = env.get("SRIFTY_SERVER"), env.get("SRIFTY_JOB_ID"), env.get("SRIFTY_TOKEN")
    if not (server and job_id and token):
        print("srifty spotwatch: SRIFTY_SERVER, SRIFTY_JOB_ID and SRIFTY_TOKEN are needed", file=sys.stderr)
        return 2
    notice_file = env.get("SRIFTY_SPOT_NOTICE_FILE", "/opt/srifty/spot-notice")
    imds = Imds(args.imds)
    if is_spot(imds) is False:
        print("srifty spotwatch: not a spot instance; no notice can come, not watching", flush=True)
        return 0
    print(f"srifty spotwatch: job {job_id}, polling IMDS every {args.every:g}s for a spot notice", flush=True)
    found = watch(
        imds,
        server,
        job_id,
        token,
        every_s=args.every,
        notice_file=notice_file,
        max_polls=args.max_polls,
    )
    return 0 if found is not None else 1


if __name__ == "__main__":
    raise SystemExit(main())
