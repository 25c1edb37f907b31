"""The GPU search page and the profile charts in a real browser (issue 22, items 6, 7 and 11).

GPU search: from the nav, search H100 on spot, read the rows (sorted by $/GPU-hour, all spot,
a sparkline where a price has a history, "one price observation" elsewhere), then a bad count is shown next to its field. Profile charts: a finished
compute run (a synthetic profile with a knee at batch 32 and the largest batch at 256, stored
through ``profiler.actions.complete_run`` on the server) shows throughput vs batch with the fit,
the knee and the largest batch, and the bucket readiness bars; a gloo comm run shows the
all-reduce points against a fitted ring. Screenshots go to the session's screenshot folder.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.frontend.knee_profile import BATCHES, KNEE, MAX_BATCH, knee_profile

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parents[2]
TINY_COMM = ROOT / "tests" / "profiler" / "fixtures" / "tiny_comm.json"

STORE_RUN = """
import json, os
from django.contrib.auth import get_user_model
import profiler.tasks  # binds the run's background work (stop_run) in this process too
from profiler import actions
owner = get_user_model().objects.get(username=os.environ["B_OWNER"])
fields = json.loads(os.environ["B_FIELDS"])
run = actions.create_run(owner, start=False, **fields)
run = actions.complete_run(run, json.load(open(os.environ["B_PROFILE"])))
print("RUN=%d" % run.pk)
"""


# Older spot observations of one offer (before the snapshot's, so no current price changes):
# its sparkline then has a history to draw.
OLDER_PRICES = """
from datetime import timedelta
from decimal import Decimal
from catalog.models import SpotPrice
latest = SpotPrice.objects.filter(instance_type__name="p5.48xlarge", zone__zone_id="use2-az1").latest("observed_at")
for days, usd in ((90, "14.2"), (60, "12.9"), (30, "13.6")):
    SpotPrice.objects.get_or_create(instance_type=latest.instance_type, zone=latest.zone,
        observed_at=latest.observed_at - timedelta(days=days), defaults={"usd_per_hour": Decimal(usd), "source": "admin"})
print("OK")
"""


def server_shell(server, script: str, **env: str) -> str:
    """Run ``script`` in ``manage.py shell`` against the server's database."""
    out = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", script],
        cwd=ROOT,
        env={**server.env, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def store_run(server, owner: str, fields: dict, profile: dict, tmp_path: Path) -> int:
    """A finished run with ``profile``, stored by the server's own code (its database)."""
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(profile))
    out = server_shell(server, STORE_RUN, B_OWNER=owner, B_FIELDS=json.dumps(fields), B_PROFILE=str(path))
    return int(next(line for line in out.splitlines() if line.startswith("RUN="))[4:])


def money(text: str) -> float:
    return float(text.replace("$", "").replace(",", ""))


@pytest.mark.timeout(180)
def test_gpu_search_finds_h100_spot_across_regions_sorted_by_dollars_per_gpu_hour(staff_tab):
    page = staff_tab.page
    server_shell(staff_tab.server, OLDER_PRICES)
    page.goto("/catalog/")
    with page.expect_navigation():
        page.click("header nav a:has-text('GPU search')")
    assert page.url.endswith("/catalog/gpus/")
    page.fill("#gpu", "h100")
    page.select_option("#market", "spot")
    with page.expect_navigation():
        page.click("#gpu-search-form button[type=submit]")
    rows = page.locator("#gpu-table tbody tr")
    n = rows.count()
    assert n > 1
    cells = [r.split("\t") for r in rows.all_inner_texts()]
    assert all(c[1].startswith("H100 × ") and c[7] == "spot" and c[6] != "—" for c in cells), cells[:3]
    per_gpu = [money(c[9]) for c in cells]
    assert per_gpu == sorted(per_gpu)
    assert len({c[5] for c in cells}) > 1  # several regions in one list
    # a sparkline only where a price has a history (the offer given older prices here, and
    # us-east-1's spot offers when the catalog chart test ran first on this server), drawn (not
    # zero-sized); every other row says it has one observation; an interruption cell each
    sparks = page.locator("#gpu-table tbody tr:has(img.spark)").all_inner_texts()
    assert any("use2-az1" in r for r in sparks), sparks
    assert all("use2-az1" in r or "us-east-1" in r for r in sparks), sparks
    assert page.locator("#gpu-table .one-observation").count() == n - len(sparks)
    box = page.locator("#gpu-table img.spark").first.bounding_box()
    assert box and box["width"] > 50 and box["height"] > 10
    assert all(c[11] for c in cells)
    # the offer with a history draws it as a line of four observations
    row = page.locator("#gpu-table tbody tr", has_text="use2-az1")
    svg = base64.b64decode(row.locator("img.spark").get_attribute("src").split(",", 1)[1]).decode()
    assert svg.count("<polyline") == 1 and "4 observations" in svg
    row.locator("img.spark").screenshot(path=str(staff_tab._shots / "sparkline.png"))
    assert "of" in page.inner_text("#gpu-count")
    staff_tab.shot("h100-spot")

    # 8 GPUs only, then a bad count (typed into the URL: the form's own checks stop it)
    page.fill("#count", "8")
    with page.expect_navigation():
        page.click("#gpu-search-form button[type=submit]")
    eight = page.locator("#gpu-table tbody tr").all_inner_texts()
    assert eight and all("H100 × 8" in r for r in eight)
    resp = page.goto("/catalog/gpus/?gpu=H100&count=0")
    assert resp.status == 400
    assert "positive whole number of GPUs" in page.inner_text("#count-error")
    staff_tab.shot("bad-count")
    errors = [
        e for e in staff_tab.errors if not ("status of 400" in e and "count=0" in e)
    ]  # that one we asked for
    assert not errors, errors


@pytest.mark.timeout(180)
def test_profile_charts_show_throughput_fit_knee_largest_batch_and_bucket_readiness(
    staff_tab, accounts, tmp_path
):
    page, server = staff_tab.page, staff_tab.server
    run_id = store_run(
        server,
        accounts["staff"][0],
        {
            "kind": "compute",
            "model_spec": "examples.tiny_model:build",
            "input_shape": "3,16,16",
            "batch_sizes": "auto",
            "iters": 6,
        },
        knee_profile(),
        tmp_path,
    )
    page.goto(f"/profiling/{run_id}/")
    page.wait_for_selector("#throughput-chart .plotly svg.main-svg")
    page.wait_for_selector("#buckets-chart .plotly svg.main-svg")
    chart = page.evaluate(
        """() => { const el = document.getElementById("throughput-chart");
             return {traces: el.data.map((t) => ({name: t.name, x: t.x, n: t.x.length,
                                                   errors: !!(t.error_y && t.error_y.array)})),
                     shapes: (el.layout.shapes || []).map((s) => s.x0),
                     notes: (el.layout.annotations || []).map((a) => a.text)}; }"""
    )
    names = [t["name"] for t in chart["traces"]]
    assert names == ["measured", "fitted (piecewise linear)", "knee"], names
    measured, fitted, knee = chart["traces"]
    assert measured["x"] == list(BATCHES) and measured["errors"]
    assert fitted["n"] > 20 and knee["x"] == [KNEE]
    assert MAX_BATCH in chart["shapes"] and any(
        f"largest batch that fits: {MAX_BATCH}" in t for t in chart["notes"]
    )
    # the markers, the line and the dashed limit are really drawn
    assert page.locator("#throughput-chart g.scatterlayer path.point").count() >= len(BATCHES) + 1
    assert page.locator("#throughput-chart g.scatterlayer path.js-line").count() >= 1
    buckets = page.evaluate(
        "() => document.getElementById('buckets-chart').data.map((t) => [t.name, t.x.length])"
    )
    assert buckets == [[f"batch {b}", 3] for b in BATCHES]
    assert "knee at batch 32" in page.inner_text("#throughput-note")
    page.locator("#profile-charts").scroll_into_view_if_needed()
    staff_tab.shot("compute")
    page.locator("#throughput-chart").screenshot(path=str(staff_tab._shots / "throughput-chart.png"))
    assert not staff_tab.errors, staff_tab.errors


@pytest.mark.timeout(180)
def test_an_allreduce_run_is_charted_against_the_model(staff_tab, accounts, tmp_path):
    page, server = staff_tab.page, staff_tab.server
    profile = json.loads(TINY_COMM.read_text())
    run_id = store_run(
        server,
        accounts["staff"][0],
        {
            "kind": "comm",
            "model_spec": "",
            "input_shape": "",
            "world_size": 2,
            "backend": "gloo",
            "sizes": "1KB..16MB",
        },
        profile,
        tmp_path,
    )
    page.goto(f"/profiling/{run_id}/")
    page.wait_for_selector("#allreduce-chart .plotly svg.main-svg")
    traces = page.evaluate(
        "() => document.getElementById('allreduce-chart').data.map((t) => [t.name, t.x.length])"
    )
    assert traces[0] == ["measured (median, p10–p90)", len(profile["samples"])]
    assert traces[1][0].startswith("ring model fitted to this run") and traces[1][1] > 10
    assert "ring model" in page.inner_text("#allreduce-note")
    page.locator("#profile-charts").scroll_into_view_if_needed()
    staff_tab.shot("comm")
    assert not staff_tab.errors, staff_tab.errors
