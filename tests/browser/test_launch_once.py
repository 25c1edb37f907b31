"""A launch is sent once from the pages, and a resent confirmation shows the job it launched
(issue 33 item 3), in a real browser.

The launch page's form and the plan page's launch dialog each send one request for a double
click. When the dialog's launch is sent twice anyway (its first answer lost, as a client retry
would), the server launches one job and the dialog shows the 409 with a link to that job.
"""

from __future__ import annotations

import re

import pytest

from tests.browser.test_launch_dialog import GOOD_TASK, open_dialog, option, store_plan

pytestmark = pytest.mark.browser


def jobs_of(server, plan_id: int) -> list[int]:
    found = server.api("GET", "/api/v1/jobs/?page_size=100")
    rows = found["results"] if isinstance(found, dict) else found
    return [j["id"] for j in rows if j["plan"] == plan_id]


def launch_posts(page, path: str) -> list[str]:
    """Every POST the page sends to ``path``, recorded as it goes."""
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.url) if r.method == "POST" and r.url.endswith(path) else None)
    return sent


def refused(errors: list[str], status: int, path: str) -> list[str]:
    """The browser's errors other than its "failed to load resource" for an answer we expect."""
    return [e for e in errors if f"status of {status}" not in e or path not in e]


@pytest.mark.timeout(180)
def test_a_double_click_on_the_launch_pages_button_sends_one_launch(staff_tab):
    server, page = staff_tab.server, staff_tab.page
    plan_id = store_plan(server, option("g5.xlarge", "use1-az1"))
    page.goto(f"/jobs/new/?plan={plan_id}&rank=1")
    page.fill("input[name=train_command]", "train.py --epochs 1")
    page.click("#review-button")
    page.wait_for_selector("#launch-button")
    sent = launch_posts(page, "/jobs/new/")
    with page.expect_navigation(url=re.compile(r"/jobs/\d+/$")):
        page.dblclick("#launch-button")
    assert len(sent) == 1, sent
    assert jobs_of(server, plan_id) == [int(re.search(r"/jobs/(\d+)/$", page.url).group(1))]
    assert not staff_tab.errors, staff_tab.errors


@pytest.mark.timeout(180)
def test_the_dialog_sends_one_launch_and_shows_a_resent_ones_job(staff_tab):
    server = staff_tab.server
    plan_id = store_plan(server, option("g5.xlarge", "use1-az1"))
    page = open_dialog(staff_tab, plan_id)
    page.fill("#launch-task-text", GOOD_TASK)
    page.click("#launch-review")
    page.wait_for_selector("#launch-go:not([hidden])")
    sent = launch_posts(page, "/api/v1/jobs/")
    first: dict = {}

    def lost_then_resent(route):
        # The launch reaches the server, its answer is lost, and the same request goes again.
        first["answer"] = route.fetch()
        route.continue_()

    page.route("**/api/v1/jobs/", lost_then_resent)
    page.dblclick("#launch-go")
    page.wait_for_selector("#launch-field-errors:not([hidden]) a")
    assert len(sent) == 1, sent  # the second click sent nothing
    made = first["answer"].json()["id"]
    shown = page.inner_text("#launch-field-errors")
    assert (
        shown
        == f"this confirmation already launched job {made}; preview again to launch another · Go to job {made}"
    )
    assert page.get_attribute("#launch-field-errors a", "href") == f"/jobs/{made}/"
    assert page.locator("#launch-go").is_hidden()  # preview again to launch again
    assert jobs_of(server, plan_id) == [made]
    staff_tab.shot("confirmation-used")
    assert not refused(staff_tab.errors, 409, "/api/v1/jobs/"), staff_tab.errors
