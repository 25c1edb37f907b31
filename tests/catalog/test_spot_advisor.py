"""Spot Advisor rows in the catalog: bundled import, the public feed over real HTTP, admin edits kept."""

from __future__ import annotations

import csv
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.management import CommandError, call_command

from catalog import spot_advisor
from catalog.models import InstanceType, Region, SpotInterruption


@pytest.fixture
def bundled(catalog):
    return spot_advisor.import_bundled()


def test_all_614_bundled_rows_are_in_the_catalog_after_import_catalog(db, capsys):
    call_command("import_catalog")
    out = capsys.readouterr().out
    assert "Spot Advisor: 614 rows read; +614 created" in out
    assert SpotInterruption.objects.filter(source="spot-advisor").count() == 614
    # Regions with spot data but no price row in the snapshot are created (e.g. il-central-1).
    assert Region.objects.filter(code="il-central-1").exists()
    with open(spot_advisor.bundled_path(), newline="") as f:
        row = next(
            r
            for r in csv.DictReader(f)
            if r["region"] == "ca-central-1" and r["instance_type"] == "p5.48xlarge"
        )
    got = SpotInterruption.objects.get(instance_type__name="p5.48xlarge", region__code="ca-central-1")
    assert (got.bucket, got.savings_pct) == (int(row["interruption_range_index"]), int(row["savings_pct"]))


def test_a_second_import_changes_nothing(bundled):
    again = spot_advisor.import_bundled()
    assert (again.created, again.updated) == (0, 0) and SpotInterruption.objects.count() == 614


def test_an_admin_edit_survives_a_refresh(bundled, staff, client):
    row = SpotInterruption.objects.get(instance_type__name="p4d.24xlarge", region__code="us-east-1")
    client.force_login(staff)
    resp = client.post(
        f"/admin/catalog/spotinterruption/{row.pk}/change/",
        {
            "instance_type": row.instance_type_id,
            "region": row.region_id,
            "bucket": 4,
            "savings_pct": 10,
            "note": "ours",
        },
    )
    assert resp.status_code == 302, resp.content[:500]
    report = spot_advisor.import_bundled()
    row.refresh_from_db()
    assert (row.bucket, row.source) == (4, "admin") and report.kept_admin == 1


def test_plans_read_the_imported_bucket(bundled):
    from planner.app.feed import candidate_rows

    rows = [r for r in candidate_rows() if r["InstanceType"] == "p4d.24xlarge" and r["Region"] == "eu-west-1"]
    want = SpotInterruption.objects.get(instance_type__name="p4d.24xlarge", region__code="eu-west-1").bucket
    assert rows and all(r["interruption_bucket"] == want for r in rows)


FEED = {
    "ranges": [{"index": 0, "label": "<5%"}, {"index": 4, "label": ">20%"}],
    "spot_advisor": {
        "us-east-1": {
            "Linux": {"p4d.24xlarge": {"s": 61, "r": 3}, "m5.large": {"s": 70, "r": 0}},
            "Windows": {"p4d.24xlarge": {"s": 10, "r": 4}},
        },
        "mx-central-1": {"Linux": {"g6.xlarge": {"s": 55, "r": 1}}},
    },
}


@pytest.fixture
def feed_url():
    body = json.dumps(FEED).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path != "/spot-advisor-data.json":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/spot-advisor-data.json"
    server.shutdown()


def test_the_feed_refreshes_linux_rows_of_catalog_types(bundled, feed_url, capsys):
    call_command("refresh_spot_advisor", "--url", feed_url)
    out = capsys.readouterr().out
    assert "3 rows read; +1 created, 1 updated" in out and "1 for types not in the catalog skipped" in out
    p4d = SpotInterruption.objects.get(instance_type__name="p4d.24xlarge", region__code="us-east-1")
    assert (p4d.bucket, p4d.savings_pct) == (3, 61) and "feed" in p4d.note
    assert SpotInterruption.objects.get(
        region__code="mx-central-1"
    ).instance_type == InstanceType.objects.get(name="g6.xlarge")


def test_an_unreachable_or_bad_feed_changes_nothing(bundled, feed_url):
    before = list(SpotInterruption.objects.values_list("pk", "bucket", "savings_pct"))
    with pytest.raises(CommandError, match="nothing refreshed: cannot read"):
        call_command("refresh_spot_advisor", "--url", feed_url.replace("spot-advisor-data", "missing"))
    with pytest.raises(CommandError, match="no 'spot_advisor'"):
        call_command("refresh_spot_advisor", "--url", "data:application/json,{}")
    with pytest.raises(CommandError, match="file not found"):
        call_command("refresh_spot_advisor", "--csv", "/nonexistent.csv")
    assert list(SpotInterruption.objects.values_list("pk", "bucket", "savings_pct")) == before


def test_a_range_outside_0_to_4_is_refused():
    with pytest.raises(spot_advisor.SpotAdvisorError, match="not 0-4"):
        spot_advisor.parse_feed({"spot_advisor": {"us-east-1": {"Linux": {"p5.48xlarge": {"s": 1, "r": 9}}}}})
