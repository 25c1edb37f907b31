"""AWS Spot Advisor in the catalog: interruption bucket and savings per (region, instance type).

Two sources, one writer (:func:`store`):

* the bundled snapshot ``catalog/fixtures/spot_advisor_gpu.csv`` (614 GPU rows, 33 regions; see
  ``catalog/fixtures/SOURCES.md``), imported by ``manage.py import_catalog``;
* AWS's public feed ``https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json``
  (``manage.py refresh_spot_advisor``), when the network allows. It is a public HTTPS file, not an
  AWS API, so it is read with urllib and needs no credentials. Its shape::

      {"ranges": [{"index": 0, "label": "<5%", ...}, ...],
       "spot_advisor": {"us-east-1": {"Linux": {"p4d.24xlarge": {"s": 54, "r": 0}, ...}}, ...}}

Only types that are in the catalog are stored (the feed lists every EC2 type); regions are
created as needed. A row an admin edited (``source == "admin"``) is never overwritten.
Plans read the bucket through ``SpotInterruption`` (``planner.app.feed``) and name it per group.
"""

from __future__ import annotations

import csv
import json
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from django.conf import settings
from django.db import transaction

from catalog import revision
from catalog.models import InstanceType, Region, SpotInterruption

FEED_URL = "https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json"
SOURCE = "spot-advisor"
MAX_FEED_BYTES = 32 * 1024 * 1024
# The bundled file's date: when the feed it copies last changed (catalog/fixtures/SOURCES.md).
BUNDLED_DATE = "2025-06-28"
BUNDLED_NOTE = f"AWS Spot Instance Advisor (bundled snapshot, {BUNDLED_DATE})"
ADMIN_LABEL = "catalog (admin)"
# Notes earlier imports stored for the bundled rows (kept as they were while their bucket is unchanged).
_EARLIER_BUNDLED_NOTES = frozenset({f"AWS Spot Advisor snapshot {BUNDLED_DATE} (bundled)"})
_FEED_NOTE_PREFIX = "AWS Spot Advisor feed"


class SpotAdvisorError(ValueError):
    pass


@dataclass(frozen=True)
class AdvisorRow:
    region: str
    instance_type: str
    bucket: int
    savings_pct: int | None


@dataclass
class AdvisorReport:
    read: int = 0
    created: int = 0
    updated: int = 0
    kept_admin: int = 0
    unknown_types: int = 0
    regions_created: int = 0

    def summary(self) -> str:
        return (
            f"Spot Advisor: {self.read} rows read; +{self.created} created, {self.updated} updated, "
            f"{self.kept_admin} admin rows kept, {self.unknown_types} for types not in the catalog skipped, "
            f"regions +{self.regions_created}"
        )


def source_label(source: str, note: str, updated_at: datetime | None) -> str:
    """Where a stored bucket comes from, as the API and pages say it (``interruption_source``).

    Only a row edited in the admin is "catalog (admin)"; an imported row names the Spot
    Instance Advisor data: the bundled snapshot with its date, or the feed or CSV an operator
    read with ``refresh_spot_advisor`` and the day the row was last written."""
    if source != SOURCE:
        return ADMIN_LABEL
    if note == BUNDLED_NOTE or note in _EARLIER_BUNDLED_NOTES:
        return BUNDLED_NOTE
    what = "live feed" if note.startswith(_FEED_NOTE_PREFIX) else (note or "imported")
    day = f", read {updated_at:%Y-%m-%d}" if updated_at else ""
    return f"AWS Spot Instance Advisor ({what}{day})"


def bundled_path() -> Path:
    return Path(settings.CATALOG_FIXTURES_DIR) / "spot_advisor_gpu.csv"


def _bucket(raw: object, where: str) -> int:
    try:
        value = int(str(raw))
    except ValueError:
        raise SpotAdvisorError(f"{where}: interruption range {raw!r} is not 0-4") from None
    if not 0 <= value <= 4:
        raise SpotAdvisorError(f"{where}: interruption range {value} is not 0-4")
    return value


def _savings(raw: object) -> int | None:
    try:
        return int(float(str(raw)))
    except ValueError:
        return None


def parse_csv(path: Path) -> list[AdvisorRow]:
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = {"region", "instance_type", "interruption_range_index"} - set(reader.fieldnames or ())
        if missing:
            raise SpotAdvisorError(f"{path.name}: missing columns {', '.join(sorted(missing))}")
        return [
            AdvisorRow(
                r["region"].strip(),
                r["instance_type"].strip(),
                _bucket(r["interruption_range_index"], f"{path.name} line {i}"),
                _savings(r.get("savings_pct", "")),
            )
            for i, r in enumerate(reader, start=2)
        ]


def parse_feed(doc: object) -> list[AdvisorRow]:
    """Rows of the public feed's Linux section (see the module docstring)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("spot_advisor"), dict):
        raise SpotAdvisorError("feed: no 'spot_advisor' mapping")
    rows = []
    for region, systems in doc["spot_advisor"].items():
        linux = systems.get("Linux", {}) if isinstance(systems, dict) else {}
        for itype, entry in linux.items() if isinstance(linux, dict) else ():
            if isinstance(entry, dict) and "r" in entry:
                rows.append(
                    AdvisorRow(
                        region, itype, _bucket(entry["r"], f"feed {region} {itype}"), _savings(entry.get("s"))
                    )
                )
    return rows


def fetch_feed(url: str = FEED_URL, timeout_s: float = 15.0) -> list[AdvisorRow]:
    """Download and parse the public feed; :class:`SpotAdvisorError` when it cannot be read."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            body = resp.read(MAX_FEED_BYTES + 1)
    except OSError as exc:
        raise SpotAdvisorError(f"cannot read {url}: {exc}") from exc
    if len(body) > MAX_FEED_BYTES:
        raise SpotAdvisorError(f"{url}: larger than {MAX_FEED_BYTES} bytes")
    try:
        return parse_feed(json.loads(body))
    except json.JSONDecodeError as exc:
        raise SpotAdvisorError(f"{url}: not JSON ({exc})") from exc


def store(rows: Iterable[AdvisorRow], note: str) -> AdvisorReport:
    """Upsert the rows in one transaction; admin rows and unknown types are left alone."""
    rows = list(rows)
    report = AdvisorReport(read=len(rows))
    types = {t.name: t for t in InstanceType.objects.filter(name__in={r.instance_type for r in rows})}
    with transaction.atomic():
        regions = {r.code: r for r in Region.objects.all()}
        existing = {(s.instance_type_id, s.region_id): s for s in SpotInterruption.objects.all()}
        for row in rows:
            itype = types.get(row.instance_type)
            if itype is None:
                report.unknown_types += 1
                continue
            region = regions.get(row.region)
            if region is None:
                region = regions[row.region] = Region.objects.create(code=row.region)
                report.regions_created += 1
            current = existing.get((itype.pk, region.pk))
            if current is None:
                SpotInterruption.objects.create(
                    instance_type=itype,
                    region=region,
                    bucket=row.bucket,
                    savings_pct=row.savings_pct,
                    source=SOURCE,
                    note=note[:200],
                )
                report.created += 1
            elif current.source != SOURCE:
                report.kept_admin += 1
            elif (current.bucket, current.savings_pct) != (row.bucket, row.savings_pct):
                current.bucket, current.savings_pct, current.note = row.bucket, row.savings_pct, note[:200]
                current.save(update_fields=["bucket", "savings_pct", "note", "updated_at"])
                report.updated += 1
        revision.bump()
    return report


def import_bundled() -> AdvisorReport:
    return store(parse_csv(bundled_path()), BUNDLED_NOTE)
