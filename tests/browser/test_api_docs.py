"""The API's Swagger UI (/api/docs/) in Chromium: served offline (drf-spectacular-sidecar's
files, no CDN), it shows the tag sections of srifty_web/openapi.py in their order and each
operation's one-line summary."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from srifty_web.openapi import OPERATIONS, TAGS

pytestmark = pytest.mark.browser


def test_the_swagger_ui_loads_offline_with_the_tag_sections_and_the_operations_summaries(staff_tab):
    page, here = staff_tab.page, urlsplit(staff_tab.server.url).netloc
    asked: list[str] = []
    page.on("request", lambda req: asked.append(req.url))
    page.goto("/api/docs/")
    page.wait_for_selector(".opblock-tag-section", timeout=30_000)

    shown_tags = page.eval_on_selector_all("h3.opblock-tag", "els => els.map((e) => e.dataset.tag)")
    assert shown_tags == [t["name"] for t in TAGS]  # "internal (agents and nodes)" last
    section = page.locator("h3.opblock-tag[data-tag='plans']")
    assert "rank GPU clusters" in section.inner_text()
    summaries = page.eval_on_selector_all(
        ".opblock-summary-description", "els => els.map((e) => e.textContent.trim())"
    )
    assert OPERATIONS["GET /api/v1/plans/"][1] in summaries
    assert OPERATIONS["POST /api/v1/auth/token/"][1] in summaries

    outside = [u for u in asked if urlsplit(u).scheme in ("http", "https") and urlsplit(u).netloc != here]
    assert not outside, outside  # the UI, its scripts and the schema all from this server
    assert any("/api/schema" in u for u in asked), asked  # it read the schema it shows
    assert not staff_tab.errors, staff_tab.errors
    staff_tab.shot()
