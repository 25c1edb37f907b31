"""The job page's script in Chromium: the chart of observed vs predicted (p50, p90) per rank,
and live updates from the websocket's messages (spend_usd a decimal string, as
``launcher.jobs.status_message`` sends it; a stand-in socket feeds them: the live server
of these tests speaks HTTP only; the real socket is tested in test_jobs_ws.py)."""

from __future__ import annotations

import os

import pytest

from launcher.models import JobReport
from tests.support.jobs import browser_session_cookie, g5_spot_option, may_launch, running_job, solved_plan

CHROMIUM = "/usr/bin/chromium"
pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Chromium"),
]
OPTION = g5_spot_option()
FAKE_SOCKET = """
window.WebSocket = function (url) {
  const ws = this; window.__wsUrl = url;
  setTimeout(() => {
    const send = (m) => ws.onmessage && ws.onmessage({data: JSON.stringify(m)});
    ws.onopen && ws.onopen();
    send({type: "snapshot", status: "running", spend_usd: "0.5000", drift: false, reason: ""});
    send({type: "report", iteration: 25, iter_time_s: 0.9, rank: 2});
    send({type: "event", kind: "drift", message: "iterations take 0.9 s", at: "2026-12-02T15:00:00+00:00"});
    send({type: "status", status: "running", spend_usd: "1.2500", drift: true, reason: ""});
  }, 200);
};
"""


def test_the_chart_shows_each_rank_against_the_prediction_and_follows_live_messages(
    live_server, user, settings
):
    from playwright.sync_api import sync_playwright

    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    owner = may_launch(user)
    plan = solved_plan(owner, OPTION, total_samples=6400)
    job = running_job(owner, plan, ["i-0a", "i-0b"], {"i-0a": "10.0.0.1"})
    JobReport.objects.bulk_create(
        [
            JobReport(job=job, rank=r, seq=i, iteration=i, iter_time_s=0.5 + 0.01 * i)
            for r in (0, 1)
            for i in range(1, 20)
        ]
    )
    login = browser_session_cookie(owner, live_server.url)  # before Playwright's event loop runs here
    errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            context = browser.new_context()
            context.add_cookies([login])
            context.add_init_script(FAKE_SOCKET)
            page = context.new_page()
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(f"{live_server.url}/jobs/{job.pk}/")
            page.wait_for_function("document.getElementById('iter-chart').data?.length === 5", timeout=20_000)
            traces = page.evaluate(
                "document.getElementById('iter-chart').data.map(t => [t.name, t.x.length])"
            )
            assert traces == [
                ["predicted p50", 2],
                ["predicted p90", 2],
                ["rank 0", 19],
                ["rank 1", 19],
                ["rank 2", 1],
            ]
            predicted = page.evaluate("document.getElementById('iter-chart').data.slice(0, 2).map(t => t.y)")
            assert predicted == [[0.5, 0.5], [0.6, 0.6]]
            assert page.evaluate("window.__wsUrl").endswith(f"/ws/jobs/{job.pk}/")
            assert page.inner_text("#spend") == "$1.25" and page.is_visible("#drift")
            assert page.inner_text("#events").splitlines()[0].endswith("drift iterations take 0.9 s")
        finally:
            browser.close()
    assert not errors
