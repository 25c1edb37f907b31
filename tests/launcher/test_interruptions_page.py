"""The job page shows checkpoints, interruptions, what they cost and the deadline guard: server
rendered (no JavaScript), and re-drawn live in Chromium when an event says they changed."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.utils import timezone

from launcher import interruptions
from launcher.models import Job, JobInterruption
from tests.support.jobs import browser_session_cookie, g5_spot_option, may_launch, running_job, solved_plan

CHROMIUM = "/usr/bin/chromium"
OPTION = g5_spot_option()


def make_job(user) -> Job:
    owner = may_launch(user)
    plan = solved_plan(owner, OPTION, total_samples=6400, deadline_hours=5)
    return running_job(owner, plan, ["i-0aaa", "i-0ccc"], {"i-0aaa": "10.0.0.1"})


def interrupt(job: Job, minutes_ago: float = 10) -> JobInterruption:
    at = timezone.now() - timedelta(minutes=minutes_ago)
    ckpt = interruptions.record_checkpoint(
        job, 120, samples=7680, path="s3://b/ckpt/120.pt", at=at - timedelta(minutes=12)
    )
    return JobInterruption.objects.create(
        job=job,
        instance_id="i-0bbb",
        instance_type="g5.xlarge",
        market="spot",
        cause="spot_notice",
        at=at,
        checkpoint=ckpt,
        lost_min=12.0,
        restart_min=6.0,
        hourly_usd=Decimal("1.0"),
        replacement_ids=["i-0ccc"],
        replacement_market="spot",
    )


@pytest.mark.django_db
def test_the_page_lists_checkpoints_and_interruptions_with_their_cost_without_javascript(
    client, user, settings
):
    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    job = make_job(user)
    interrupt(job)
    client.force_login(user)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "Checkpoints and interruptions" in page
    assert "i-0bbb" in page and "spot_notice" in page and "s3://b/ckpt/120.pt" in page
    assert ">12.0<" in page and '6.0 <span class="muted">(assumed)</span>' in page
    assert 'id="interruptions-cost">$0.30<' in page and 'id="interruptions-lost">18.0 min<' in page
    assert "Young/Daly" in page and 'id="guard"' in page


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Chromium")
def test_an_interruption_event_redraws_the_tables_from_the_api(live_server, user, settings):
    from playwright.sync_api import sync_playwright

    settings.TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
    job = make_job(user)
    fake_socket = "window.WebSocket = function () { window.__ws = this; };"
    login = browser_session_cookie(user, live_server.url)  # before Playwright's event loop runs here
    errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            context = browser.new_context(viewport={"width": 1300, "height": 1800})
            context.add_cookies([login])
            context.add_init_script(fake_socket)
            page = context.new_page()
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(f"{live_server.url}/jobs/{job.pk}/")
            assert "No interruptions." in page.inner_text("#interruptions-table")
            with ThreadPoolExecutor(1) as pool:  # the ORM refuses Playwright's event-loop thread
                pool.submit(interrupt, job).result()
            page.evaluate(
                """window.__ws.onmessage({data: JSON.stringify({type: "event", kind: "interruption_cost",
                   message: "i-0bbb lost", at: "2026-12-06T01:00:00+00:00"})})"""
            )
            page.wait_for_function(
                "document.querySelector('#interruptions-table tbody').innerText.includes('i-0bbb')",
                timeout=20_000,
            )
            row = page.inner_text("#interruptions-table tbody tr")
            assert (
                "spot_notice" in row
                and "12.0" in row
                and "6.0 (assumed)" in row
                and "$0.30" in row
                and "i-0ccc" in row
            )
            assert page.inner_text("#interruptions-cost") == "$0.30"
            assert "s3://b/ckpt/120.pt" in page.inner_text("#checkpoints-table")
            shots = Path(os.environ.get("SRIFTY_SCREENSHOTS", "/tmp"))
            page.locator("#resilience").screenshot(path=str(shots / "job_resilience.png"))
        finally:
            browser.close()
    assert not errors
