"""``Reporter.checkpoint``: a written checkpoint is reported on its own thread, retried, once."""

from __future__ import annotations

import json

from profiler.agent.posting import RetryPolicy
from profiler.agent.report import NullReporter, Reporter


def test_a_checkpoint_is_posted_with_the_job_token_and_retried_on_a_server_error():
    calls = []
    answers = iter([503, 201])

    def transport(url, body, headers, timeout):
        calls.append((url, json.loads(body), headers["Authorization"]))
        return next(answers)

    r = Reporter("http://srv", 5, "tok", rank=3, transport=transport, retry=RetryPolicy(3, 0.01, 0.02, 1.0))
    r.checkpoint(1200, path="s3://b/ckpt/1200.pt", samples=153_600).join(5)
    r.close()
    assert len(calls) == 2 and r.checkpoints_sent == 1
    url, body, auth = calls[-1]
    assert url == "http://srv/api/v1/jobs/5/checkpoints/" and auth == "Bearer tok"
    assert body == {"iteration": 1200, "path": "s3://b/ckpt/1200.pt", "rank": 3, "samples": 153_600}


def test_outside_a_job_a_checkpoint_reports_nothing():
    assert NullReporter().checkpoint(3) is None
