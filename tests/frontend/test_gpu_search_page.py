"""The GPU search page (/catalog/gpus/): filters, rows sorted by $/GPU-hour, sparklines, risk."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.django_db


def test_it_needs_a_login(client, catalog):
    resp = client.get("/catalog/gpus/")
    assert resp.status_code == 302 and resp["Location"].startswith("/accounts/login/")


def test_h100_spot_rows_are_sorted_by_dollars_per_gpu_hour_with_sparklines_and_risk(client, user, catalog):
    client.force_login(user)
    resp = client.get("/catalog/gpus/", {"gpu": "h100", "market": "spot"})
    assert resp.status_code == 200
    rows = [o for o, _ in resp.context["rows"]]
    assert rows and {o.gpu for o in rows} == {"H100"} and {o.market for o in rows} == {"spot"}
    per_gpu = [o.usd_per_gpu_hour for o in rows]
    assert per_gpu == sorted(per_gpu)
    page = resp.content.decode()
    body = page[page.index('<table id="gpu-table"') :]
    # the snapshot has one observation per price: each row says so instead of drawing a dot
    assert body.count('<img class="spark"') == 0
    assert body.count("one price observation") == len(rows)
    assert "<script" not in body.split("</table>")[0]  # no JavaScript needed for the table
    assert "H100 × 8" in page and "USD/GPU-h" in page
    assert re.search(r'class="badge bucket-\d"', page) or "unknown" in page


def test_filters_count_memory_efa_and_region(client, user, catalog):
    client.force_login(user)
    rows = client.get(
        "/catalog/gpus/", {"gpu": "A100", "count": "8", "efa": "true", "region": "us-east-1"}
    ).context["rows"]
    assert rows and all(o.gpu_count == 8 and o.efa and o.region == "us-east-1" for o, _ in rows)
    big = client.get("/catalog/gpus/", {"min_memory_gib": "79", "market": "on-demand"}).context["rows"]
    assert big and all(o.gpu_memory_gib >= 79 and o.market == "on-demand" and o.zone is None for o, _ in big)


@pytest.mark.parametrize(
    ("params", "field", "text"),
    [
        ({"market": "auction"}, "market", "not a valid choice"),
        ({"count": "0"}, "count", "positive whole number of GPUs"),
        ({"gpu": "H1000"}, "gpu", "unknown GPU"),
    ],
)
def test_bad_input_is_shown_next_to_its_field_with_a_400(client, user, catalog, params, field, text):
    client.force_login(user)
    resp = client.get("/catalog/gpus/", params)
    assert resp.status_code == 400 and field in resp.context["errors"]
    assert text in resp.content.decode()


def test_the_catalog_page_and_the_nav_link_to_it(client, user, catalog):
    client.force_login(user)
    page = client.get("/catalog/").content.decode()
    assert page.count('href="/catalog/gpus/"') == 2  # nav + the catalog page's sentence
