"""The ``catalog`` fixture's copy of the snapshot (tests/support/catalog_copy.py) is what the
importer writes: every table, row for row, with the same report."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from catalog.models import CatalogRevision, InstanceType, Region
from tests.support import catalog_copy

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(
        connection.vendor not in ("sqlite", "postgresql"), reason="the copy is made on SQLite and PostgreSQL"
    ),
]

STAMPS = {"updated_at", "changed_at"}  # the import sets them to its own time


def _unstamped(rows):
    out = {}
    for table, (columns, values) in rows.items():
        keep = [i for i, c in enumerate(columns) if c not in STAMPS]
        out[table] = [tuple(row[i] for i in keep) for row in values]
    return out


def test_the_copy_is_row_for_row_what_the_importer_wrote_with_the_same_report(monkeypatch):
    monkeypatch.setattr(catalog_copy, "_kept", {})
    mark = transaction.savepoint()
    imported = catalog_copy.load_snapshot()  # the real import: nothing kept yet
    assert list(catalog_copy._kept) == [catalog_copy.snapshot_key()]
    real = catalog_copy.read_rows()
    transaction.savepoint_rollback(mark)
    assert catalog_copy.catalog_is_empty()

    before = timezone.now()
    with CaptureQueriesContext(connection) as queries:
        copied = catalog_copy.load_snapshot()
    assert len(queries) < 40  # a copy (one INSERT per table), not the import's ~450 statements
    again = catalog_copy.read_rows()
    assert copied == imported and copied is not catalog_copy._kept[catalog_copy.snapshot_key()].report
    assert {t: len(v) for t, (_, v) in again.items()} == {t: len(v) for t, (_, v) in real.items()}
    assert _unstamped(again) == _unstamped(real)
    assert InstanceType.objects.count() == 87 and all(
        t.updated_at >= before for t in InstanceType.objects.all()
    )
    revision = CatalogRevision.objects.get()
    assert revision.number > 1 and revision.changed_at >= before
    # the next row's primary key goes on after the copy's, as after the import
    last = max(row[0] for row in real[InstanceType._meta.db_table][1])
    assert InstanceType.objects.create(name="zz1.test", family="zz1", vcpus=1, memory_gib=1).pk == last + 1


def test_a_catalog_that_is_not_empty_is_imported_for_real():
    Region.objects.create(code="us-east-1")
    report = catalog_copy.load_snapshot()
    assert report.regions_created == Region.objects.count() - 1 > 0
    assert report.instance_types_created == InstanceType.objects.count() == 87
