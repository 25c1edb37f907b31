"""The profiling pages in a real browser (issue 38 item 5).

* The form shows only the fields of the chosen kind (compute / comm) and place (local / EC2), and
  in single-user mode (the test server runs with SRIFTY_LOCAL_CODE=1, as ``./run`` does) warns
  that the model field imports and runs code on this machine.
* A run without measurements says it waits for them instead of drawing empty axes; progress
  events posted with the run's agent token draw the live latency chart against the iteration index
  within each batch, and after the result (the page reloads itself) the stored chart uses the same
  axis and the distribution per phase is one small panel per phase with batch on a log axis.
* A noisy run (batch 256 measured faster than batch 128, its forward pass spread with CV > 0.2)
  is flagged on the page, with the advice to use more iterations and a link that does.

Runs are stored by the server's own code (``manage.py shell``), as in
``test_gpus_and_profile_charts.py``. Screenshots go to the session's screenshot folder.
"""

from __future__ import annotations

import json
import statistics

import pytest
import requests

from tests.browser.test_gpus_and_profile_charts import server_shell, store_run
from tests.frontend.knee_profile import BATCHES, _stats, knee_profile

pytestmark = pytest.mark.browser

COMPUTE = {
    "kind": "compute",
    "model_spec": "examples.tiny_model:build",
    "input_shape": "3,16,16",
    "batch_sizes": "auto",
    "iters": 6,
}

PENDING_RUN = """
import json, os
from django.contrib.auth import get_user_model
import profiler.tasks  # binds the run's background work in this process too
from profiler import actions
owner = get_user_model().objects.get(username=os.environ["B_OWNER"])
run = actions.create_run(owner, start=False, **json.loads(os.environ["B_FIELDS"]))
print("RUN=%d TOKEN=%s" % (run.pk, actions.issue_token(run)))
"""


def visible(page, selector: str) -> bool:
    return page.locator(selector).first.is_visible()


def noisy_profile() -> dict:
    """The knee profile with batch 256 measured at 0.4x its time (faster than batch 128: noise)
    and its forward times spread (CV > 0.2)."""
    doc = knee_profile()
    s = next(s for s in doc["samples"] if s["batch_size"] == 256)
    spread = (0.3, 1.0, 1.7, 0.4, 1.5, 0.5)
    fwd = [0.4 * statistics.median(s["phases"]["forward"]["times_ms"]) * f for f in spread]
    bwd = [0.4 * t for t in s["phases"]["backward"]["times_ms"]]
    opt = s["phases"]["optimizer"]["times_ms"]
    s["phases"]["forward"], s["phases"]["backward"] = _stats(fwd), _stats(bwd)
    s["phases"]["step"] = _stats([f + b + o for f, b, o in zip(fwd, bwd, opt, strict=True)])
    return doc


def latency_traces(page) -> dict:
    return page.evaluate(
        """() => { const el = document.getElementById("latency-chart");
             return {x: el.layout.xaxis.title.text,
                     traces: Object.fromEntries((el.data || []).map((t) => [t.name, Array.from(t.x)]))}; }"""
    )


@pytest.mark.timeout(180)
def test_the_form_shows_only_the_fields_of_the_chosen_kind_and_place_and_warns_about_code(staff_tab):
    page = staff_tab.page
    page.goto("/profiling/")
    form = "#profile-form"
    field = {
        name: f"{form} [name={name}]"
        for name in ("model_spec", "input_shape", "sizes", "world_size", "nodes", "instance_type", "iters")
    }
    # compute on this machine (the defaults): the model fields, the code warning, no comm or EC2 field
    assert visible(page, field["model_spec"]) and visible(page, field["input_shape"])
    assert "ImageNet plans need 3,224,224" in page.inner_text("#input-shape-help")
    assert visible(page, "#code-warning") and "runs code on this machine" in page.inner_text("#code-warning")
    assert not visible(page, field["sizes"]) and not visible(page, field["instance_type"])
    assert page.locator(field["sizes"]).is_disabled()  # hidden: not sent; the server fills its default
    staff_tab.shot("compute-local")

    page.select_option(f"{form} select[name=kind]", "comm")
    assert visible(page, field["sizes"]) and visible(page, field["world_size"])
    assert not visible(page, field["model_spec"]) and not visible(page, "#code-warning")
    assert not visible(page, field["nodes"])  # a cluster is an EC2 thing
    assert visible(page, field["iters"])

    page.select_option(f"{form} select[name=provider]", "ec2")
    assert visible(page, field["nodes"]) and visible(page, field["instance_type"])
    staff_tab.shot("comm-ec2")

    page.select_option(f"{form} select[name=kind]", "compute")
    assert visible(page, field["model_spec"]) and visible(page, field["instance_type"])
    assert not visible(page, field["nodes"]) and not visible(page, "#code-warning")  # EC2: the team's VM
    assert not staff_tab.errors, staff_tab.errors


@pytest.mark.timeout(240)
def test_a_run_waits_then_charts_live_and_stored_latency_on_one_axis_and_a_panel_per_phase(
    staff_tab, accounts
):
    page, server = staff_tab.page, staff_tab.server
    out = server_shell(server, PENDING_RUN, B_OWNER=accounts["staff"][0], B_FIELDS=json.dumps(COMPUTE))
    line = next(line for line in out.splitlines() if line.startswith("RUN="))
    run_id, token = int(line.split()[0][4:]), line.split()[1][6:]
    page.goto(f"/profiling/{run_id}/")
    # nothing measured yet: a line, no empty axes
    assert "Waiting for the first measurements" in page.inner_text("#latency-waiting")
    assert "Waiting for the first measurements" in page.inner_text("#phase-waiting")
    assert not visible(page, "#latency-chart") and page.locator("#phase-chart").count() == 0
    staff_tab.shot("waiting")

    seq = 0

    def post(event: dict) -> None:
        nonlocal seq
        seq += 1
        resp = requests.post(
            f"{server.url}/api/v1/profiling-runs/{run_id}/events/",
            json={"seq": seq, **event},
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        assert resp.status_code in (200, 201), resp.text

    for b in (4, 8):
        for i in range(3):
            post(
                {
                    "type": "progress",
                    "phase": "compute",
                    "batch_size": b,
                    "iteration": i,
                    "time_ms": 10.0 + b + i,
                }
            )
    page.wait_for_function(
        "() => (document.getElementById('latency-chart').data || []).reduce((n, t) => n + t.x.length, 0) >= 6"
    )
    live = latency_traces(page)
    assert live["traces"] == {"batch 4": [0, 1, 2], "batch 8": [0, 1, 2]}, live
    assert not visible(page, "#latency-waiting")
    staff_tab.shot("live")

    post({"type": "result", "profile": knee_profile()})  # the page reloads itself when it succeeds
    page.wait_for_selector("text=Compute samples", timeout=30_000)
    page.wait_for_selector("#phase-chart .plotly svg.main-svg")
    stored = latency_traces(page)
    assert stored["x"] == live["x"] == "iteration within its batch"
    assert set(stored["traces"]) == {f"batch {b}" for b in BATCHES}
    assert all(x == list(range(6)) for x in stored["traces"].values()), stored  # 6 iterations each

    panels = page.locator("#phase-chart figure.phase-panel")
    assert panels.locator("figcaption").all_inner_texts() == ["forward", "backward", "optimizer"]
    axes = page.evaluate(
        """() => [...document.querySelectorAll('#phase-chart figure.phase-panel > div')].map((el) =>
             ({type: el.layout.xaxis.type, legend: el.layout.showlegend, traces: el.data.length}))"""
    )
    # one point trace per batch and the medians' line, no legend, batch on a log axis
    assert axes == [{"type": "log", "legend": False, "traces": len(BATCHES) + 1}] * 3, axes
    # each plot fits its panel (drawn at the panel's width, not at the width the grid had before
    # the other panels were added: the larger batches were cut off at the right)
    widths = page.evaluate(
        """() => [...document.querySelectorAll('#phase-chart figure.phase-panel')].map((f) =>
             [f.getBoundingClientRect().width, f.querySelector('svg.main-svg').getBoundingClientRect().width])"""
    )
    assert all(plot <= panel + 1 for panel, plot in widths), widths
    assert page.locator("#noisy").count() == 0  # a steady profile: nothing flagged
    page.locator("#phase-chart").scroll_into_view_if_needed()
    staff_tab.shot("stored")
    page.locator("#phase-chart").screenshot(path=str(staff_tab._shots / "phase-panels.png"))
    assert not staff_tab.errors, staff_tab.errors


@pytest.mark.timeout(180)
def test_a_noisy_run_is_flagged_with_the_advice_to_use_more_iterations(staff_tab, accounts, tmp_path):
    page, server = staff_tab.page, staff_tab.server
    run_id = store_run(server, accounts["staff"][0], COMPUTE, noisy_profile(), tmp_path)
    page.goto(f"/profiling/{run_id}/")
    page.wait_for_selector("#phase-chart .plotly svg.main-svg")
    notice = page.inner_text("#noisy")
    assert "Noisy measurements: use more iterations" in notice
    assert "batch 256:" in notice and "shorter than at the smaller batch 128" in notice
    assert "batch 256, forward: CV" in notice
    rows = page.locator("tr.noisy-row").all_inner_texts()
    assert len(rows) == 3 and all(r.startswith("256\t") and "use more iterations" in r for r in rows), rows
    # the noisy points are red in their panel, the others not
    colours = page.evaluate(
        """() => [...document.querySelectorAll('#phase-chart figure.phase-panel > div')].map((el) =>
             el.data.filter((t) => t.mode === 'markers' && t.marker.color === '#c62828').map((t) => t.x[0]))"""
    )
    assert colours == [[256], [256], [256]], colours
    staff_tab.shot("noisy")
    api = server.api("GET", f"/api/v1/profiling-runs/{run_id}/")
    assert {(f["batch_size"], f["phase"]) for f in api["noisy"]} == {(256, None), (256, "forward")}

    with page.expect_navigation():
        page.click("#rerun-link")
    assert page.locator("#profile-form input[name=iters]").input_value() == "20"
    assert page.locator("#profile-form input[name=model_spec]").input_value() == COMPUTE["model_spec"]
    assert page.locator("#profile-form input[name=input_shape]").input_value() == COMPUTE["input_shape"]
    assert not staff_tab.errors, staff_tab.errors
