"""Issue 38 items 3 and 7 in a real browser: GPU search says how old its prices are and how to
refresh them, leaves AWS Local Zones out until the box is ticked and then marks them; an unknown
page is the styled 404; the favicon is served. Screenshots go to the session's folder."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.browser


@pytest.mark.timeout(120)
def test_gpu_search_dates_its_prices_and_marks_local_zones_only_when_asked(staff_tab):
    page = staff_tab.page
    page.goto("/catalog/gpus/?gpu=H100&market=spot&limit=200")
    age = page.inner_text("#price-age")
    assert re.match(
        r"Prices as of 2025-12-01 \([\d,]+ days old\)\. Older than a week: run python manage.py refresh_prices",
        age,
    ), age
    table = page.inner_text("#gpu-table")
    assert "use1-atl2-az1" not in table and "Local Zone" not in table
    page.check("#local_zones")
    with page.expect_navigation():
        page.click("#gpu-search-form button[type=submit]")
    row = page.locator("#gpu-table tbody tr", has_text="use1-atl2-az1").first
    assert row.locator(".badge.zone-kind").inner_text() == "Local Zone"
    assert row.locator(".badge.zone-kind").is_visible()
    staff_tab.shot("gpu-search-local-zones")

    missing = page.goto("/no/such/page/")
    assert missing is not None and missing.status == 404
    assert page.locator("#not-found h1").inner_text() == "Page not found"
    assert page.locator("header.top a.brand").is_visible()  # the site's own frame and style
    staff_tab.shot("not-found")
    icon = page.request.get("/favicon.ico")
    assert icon.status == 200 and icon.headers["content-type"] == "image/x-icon"
