"""The plan form's per-GPU batch minimum and the plan page's compact table (issue 38 items 1, 4):
each row's global and per-GPU batch, "Cluster $/h", the prediction source said once, one count
of configurations, a SkyPilot link per row."""

from __future__ import annotations

import re

import pytest

from frontend.plans import FORM_DEFAULTS, configuration_count, shared_prediction
from planner.app.models import PlanRecord
from planner.defaults import LR_SCALING_NOTE, MIN_BATCH_PER_GPU
from tests.frontend.test_plan_pages import FORM, _rows, solve_queued

pytestmark = pytest.mark.django_db


def _solved_page(client, user, **form) -> tuple[PlanRecord, str]:
    client.force_login(user)
    assert client.post("/plans/", {**FORM, **form}).status_code == 302
    solve_queued()
    record = PlanRecord.objects.order_by("-pk")[0]
    assert record.status == "solved", record.error
    return record, client.get(f"/plans/{record.pk}/").content.decode()


def test_the_form_offers_the_per_gpu_minimum_blank_by_default_with_the_learning_rate_note(client, user):
    client.force_login(user)
    page = client.get("/plans/").content.decode()
    field = re.search(r'<input name="min_batch_per_gpu"[^>]*>', page)
    assert field and 'value=""' in field.group(0) and f'placeholder="{MIN_BATCH_PER_GPU}"' in field.group(0)
    assert FORM_DEFAULTS["min_batch_per_gpu"] == ""
    note = re.search(r'<p class="muted batch-note" id="batch-note">(.*?)</p>', page, re.S).group(1)
    assert "knee" in note and LR_SCALING_NOTE.replace("'", "&#x27;") in note


def test_a_minimum_above_the_largest_global_batch_is_refused_in_words(client, user, catalog):
    client.force_login(user)
    resp = client.post("/plans/", {**FORM, "min_batch_per_gpu": "1024"})
    assert resp.status_code == 400 and not PlanRecord.objects.exists()
    error = re.search(r'<span class="error" id="min_batch_per_gpu-error">(.*?)</span>', resp.content.decode())
    assert error, "the message sits next to the field"
    text = error.group(1)
    assert "1024 per GPU" in text and "largest global batch, 512" in text
    assert "min_batch_per_gpu" not in text and "global_batch_max" not in text


def test_every_row_shows_its_global_and_per_gpu_batch_and_the_price_says_it_is_the_clusters(
    client, user, catalog
):
    record, page = _solved_page(client, user)
    assert re.search(
        r'<th class="num" title="the whole cluster.s price per hour[^"]*">Cluster \$/h</th>', page
    )
    assert ">Price<" not in page  # the markets table's too
    plans = record.result["plans"]
    rows = _rows(page)
    assert len(rows) == len(plans)
    for p, row in zip(plans, rows, strict=True):
        gpus = sum(g["count"] * g["gpus_per_node"] for g in p["groups"])
        assert p["batch_per_gpu"] == p["global_batch"] // gpus >= MIN_BATCH_PER_GPU
        assert not p["below_min_batch_per_gpu"]
        cell = re.search(r'<td class="num batch"[^>]*>(.*?)</td>', row, re.S).group(1)
        assert (
            f"{p['global_batch']:,}" in cell
            and f"{p['batch_per_gpu']}/GPU" in cell
            and "below min" not in cell
        )
    batch = re.search(r'<p class="muted" id="batch-once">(.*?)</p>', page, re.S).group(1)
    assert f"at least {MIN_BATCH_PER_GPU} per GPU (default)" in batch and "learning rate" in batch


def test_a_row_below_the_minimum_says_so_when_nothing_at_the_minimum_fits(client, user, catalog):
    """8-GPU A100 nodes only, at most 512 samples a step, at least 128 per GPU: no cluster of 8
    GPUs can have it, so the plans go below it and say so."""
    from planner.app import solving
    from planner.app.serializers import PlanRequestSerializer

    body = {
        "model": {k: FORM[k] for k in ("spec", "input_shape", "precision")},
        "samples_per_epoch": 100000,
        "epochs": 5,
        "objective": "time",
        "budget_usd": 500,
        "regions": ["us-east-1"],
        "max_nodes": 4,
        "global_batch_min": 256,
        "global_batch_max": 512,
        "gpu_models": ["A100"],
        "min_batch_per_gpu": 128,
    }
    checked = PlanRequestSerializer(data=body)
    assert checked.is_valid(), checked.errors
    record = solving.create_plan(user, dict(checked.validated_data))
    assert record.status == "solved", record.error
    plans = record.result["plans"]
    assert plans and all(p["below_min_batch_per_gpu"] and p["batch_per_gpu"] < 128 for p in plans)
    assert record.result["batch"]["below_min_ranks"] == [p["rank"] for p in plans]
    assert record.result["batch"]["min_per_gpu_source"] == "request"
    client.force_login(user)
    page = client.get(f"/plans/{record.pk}/").content.decode()
    for row in _rows(page):
        assert "below min 128" in row
    assert "nothing at that minimum fits" in page


def test_the_prediction_source_and_its_error_are_said_once_above_the_table_when_every_row_shares_them(
    client, user, catalog
):
    record, page = _solved_page(client, user)
    once = re.search(r'<p class="muted" id="prediction-once">(.*?)</p>', page, re.S)
    assert once and record.result["plans"][0]["prediction_source"] in once.group(1)
    assert "Prediction (model error in the band)" not in page  # no column repeating it
    assert all('class="prediction"' not in r and 'class="comm-source"' not in r for r in _rows(page))


def test_rows_that_differ_in_source_keep_their_own_prediction_cell():
    a = {"prediction_source": "measured", "model_error": {"validated": False}, "comm_source": "learned"}
    b = {**a, "prediction_source": "analytical"}
    assert shared_prediction([a, dict(a, comm_near_points=3)])["near_high"] == 3
    assert shared_prediction([a, b]) is None
    assert shared_prediction([]) is None


def test_the_chart_and_the_footer_give_the_same_count_of_configurations(client, user, catalog):
    record, page = _solved_page(client, user)
    counts = re.findall(r'<span class="configs-evaluated">([0-9,]+)</span>', page)
    assert len(counts) == 2 and counts[0] == counts[1]
    seen = record.result["stats"]["points_seen"]
    assert counts[0] == f"{seen:,}" and seen >= len(record.result["points"])
    chart = re.search(r'<p class="muted" id="chart-count">(.*?)</p>', page, re.S).group(1)
    assert "configurations evaluated (an instance type in one region and market at one node count" in chart
    assert configuration_count({"points": [1, 2]}) == {"evaluated": 2, "drawn": 2}  # older results


def test_every_row_links_its_skypilot_task_file(client, user, catalog):
    record, page = _solved_page(client, user)
    for p, row in zip(record.result["plans"], _rows(page), strict=True):
        link = f'href="/api/v1/jobs/sky-export/?plan={record.pk}&amp;rank={p["rank"]}"'
        assert link in row and ">SkyPilot</a>" in row
