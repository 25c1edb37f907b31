"""Huge or malformed catalog CSVs through the admin upload, ``import_catalog`` and
``manage.py import_catalog --csv``: a clear error, and nothing lost or half-written."""

from __future__ import annotations

import re
from io import BytesIO, StringIO

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command

from catalog import importer
from catalog.importer import INSTANCE_COLUMNS, NETWORK_COLUMNS, CatalogImportError, import_catalog
from catalog.models import (
    Accelerator,
    AvailabilityZone,
    InstanceOffering,
    InstanceType,
    OnDemandPrice,
    SpotPrice,
)

pytestmark = pytest.mark.django_db

HEADER = ",".join(INSTANCE_COLUMNS)
GOOD = "g5.xlarge,A10G,1.0,4.0,16.0,,1.006,0.4,us-east-1,use1-az1,x86_64"
URL = "/admin/catalog/instancetype/import-csv/"


def counts():
    return tuple(
        m.objects.count()
        for m in (Accelerator, InstanceType, AvailabilityZone, InstanceOffering, OnDemandPrice, SpotPrice)
    )


def csv_of(*rows: str) -> str:
    return "\n".join([HEADER, *rows]) + "\n"


@pytest.fixture
def admin_client(client, staff, catalog):
    client.force_login(staff)
    return client


# --- size ---------------------------------------------------------------------------------


def test_an_upload_over_the_size_cap_is_refused_before_it_is_read(admin_client, settings):
    settings.CATALOG_UPLOAD_MAX_BYTES = 1000
    before = counts()
    big = SimpleUploadedFile("big.csv", (csv_of(GOOD) + "#" * 2000).encode(), content_type="text/csv")
    resp = admin_client.post(URL, {"instances": big})
    assert resp.status_code == 200 and "at most 1000 bytes" in resp.content.decode()
    assert counts() == before


def test_a_huge_file_is_refused_by_the_importer_and_the_command(db, tmp_path, settings):
    settings.CATALOG_UPLOAD_MAX_BYTES = 1000
    body = csv_of(*[GOOD] * 100)
    with pytest.raises(CatalogImportError, match="larger than 1000 bytes"):
        import_catalog(BytesIO(body.encode()))
    path = tmp_path / "big.csv"
    path.write_text(body)
    with pytest.raises(CommandError, match="larger than 1000 bytes"):
        call_command("import_catalog", "--csv", str(path))
    assert InstanceType.objects.count() == 0


def test_too_many_rows_are_refused(db, monkeypatch):
    monkeypatch.setattr(importer, "MAX_ROWS", 5)
    with pytest.raises(CatalogImportError, match="more than 5 rows"):
        import_catalog(StringIO(csv_of(*[GOOD] * 6)))
    assert InstanceType.objects.count() == 0


# --- junk ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "junk",
    [
        b"\xff\xfe\x00garbage\x81",
        b"\x89PNG\r\n\x1a\n\x00\x00",
        b"PK\x03\x04\x14\x00\x00",
        (HEADER + "\n").encode() + b"g5.xlarge,\x00\x00,1\n",
        b"",
    ],
)
def test_binary_junk_is_a_clean_error_everywhere(admin_client, tmp_path, junk):
    before = counts()
    with pytest.raises(CatalogImportError):
        import_catalog(BytesIO(junk))
    path = tmp_path / "junk.csv"
    path.write_bytes(junk)
    with pytest.raises(CommandError, match="nothing imported"):
        call_command("import_catalog", "--csv", str(path))
    resp = admin_client.post(URL, {"instances": SimpleUploadedFile("junk.csv", junk or b" ")})
    assert resp.status_code == 200 and "errorlist" in resp.content.decode()
    assert counts() == before


def test_a_directory_given_to_the_command_is_a_clean_error(db, tmp_path):
    with pytest.raises(CommandError):
        call_command("import_catalog", "--csv", str(tmp_path))


def test_wrong_columns_are_named(db):
    with pytest.raises(CatalogImportError, match="missing column"):
        import_catalog(StringIO("a,b,c\n1,2,3\n"))


def test_a_bad_row_in_the_middle_leaves_nothing_half_written(catalog):
    before = counts()
    rows = [GOOD.replace("g5.xlarge", f"zz{i}.xlarge") for i in range(50)]
    rows[25] = rows[25].replace("1.006", "-3")
    with pytest.raises(CatalogImportError) as exc:
        import_catalog(StringIO(csv_of(*rows)))
    assert exc.value.errors == ["line 27: Price='-3' must be a finite number >= 0"]
    assert counts() == before and not InstanceType.objects.filter(name__startswith="zz").exists()


@pytest.mark.parametrize(
    "price", ["-1", "nan", "NaN", "inf", "-inf", "1e309", "0", "0.0", "10001", "1,5", "$3"]
)
def test_negative_nan_zero_or_absurd_prices_are_refused(db, price):
    for column in ("Price", "SpotPrice"):
        row = dict(zip(INSTANCE_COLUMNS, GOOD.split(","), strict=True))
        row[column] = price
        import csv

        buf = StringIO()
        w = csv.DictWriter(buf, fieldnames=INSTANCE_COLUMNS)
        w.writeheader()
        w.writerow(row)
        with pytest.raises(CatalogImportError, match=r"^\d+ error") as exc:
            import_catalog(StringIO(buf.getvalue()))
        assert exc.value.errors[0].startswith("line 2: ")
    assert OnDemandPrice.objects.count() == 0


@pytest.mark.parametrize(
    "column, value",
    [
        ("InstanceType", '=HYPERLINK("http://evil").x'),
        ("InstanceType", "+cmd|' /C calc'!A0.x"),
        ("InstanceType", "@SUM(1+1).x"),
        ("InstanceType", "-2+3.x"),
        ("InstanceType", "g5.xlarge; DROP TABLE"),
        ("InstanceType", "G5.XLARGE<script>"),
        ("InstanceType", "a" * 40 + ".xlarge"),
        ("AcceleratorName", "=cmd|' /C calc'!A0"),
        ("AcceleratorName", "+A10G"),
        ("AcceleratorName", "@A10G"),
        ("AcceleratorName", "<img src=x onerror=alert(1)>"),
        ("AvailabilityZone", "=1+1"),
        ("AvailabilityZone", "use1-az1\r\n=1"),
        ("Arch", "=x86"),
        ("Arch", "x86 64"),
        ("Region", "=us-east-1"),
    ],
)
def test_formula_like_or_markup_strings_are_refused(db, column, value):
    import csv

    row = dict(zip(INSTANCE_COLUMNS, GOOD.split(","), strict=True))
    row[column] = value
    buf = StringIO()
    w = csv.DictWriter(buf, fieldnames=INSTANCE_COLUMNS)
    w.writeheader()
    w.writerow(row)
    with pytest.raises(CatalogImportError) as exc:
        import_catalog(StringIO(buf.getvalue()))
    first = exc.value.errors[0]
    assert re.match(r"^line \d+: ", first) and (column in first or "region" in first), first
    assert InstanceType.objects.count() == 0


def test_the_same_type_with_contradicting_specs_is_refused(db):
    other = GOOD.replace("4.0,16.0", "8.0,32.0").replace("use1-az1", "use1-az2")
    with pytest.raises(CatalogImportError, match="line 3: g5.xlarge has other specs than on line 2"):
        import_catalog(StringIO(csv_of(GOOD, other)))


def test_a_short_or_bad_network_row_is_a_line_error_not_a_500(admin_client):
    before = counts()
    net_header = ",".join(NETWORK_COLUMNS)
    for net in (
        f"{net_header}\ng5.xlarge,25 Gigabit\n",
        f"{net_header}\n=evil.x,,,,,,,,\n",
        f"{net_header}\ng5.xlarge,=1+1,1,1,1,false,0,cluster,on-demand\n",
    ):
        with pytest.raises(CatalogImportError) as exc:
            import_catalog(StringIO(csv_of(GOOD)), network=StringIO(net))
        assert exc.value.errors[0].startswith("line 2: ")
        resp = admin_client.post(
            URL,
            {
                "instances": SimpleUploadedFile("i.csv", csv_of(GOOD).encode()),
                "network": SimpleUploadedFile("n.csv", net.encode()),
            },
        )
        assert resp.status_code == 200 and "line 2:" in resp.content.decode()
    assert counts() == before


def test_a_file_with_very_many_bad_rows_lists_a_bounded_number(admin_client):
    rows = [GOOD.replace("1.006", "x")] * 500
    resp = admin_client.post(URL, {"instances": SimpleUploadedFile("bad.csv", csv_of(*rows).encode())})
    page = resp.content.decode()
    assert resp.status_code == 200 and "and 400 more" in page and page.count("<li>line ") == 100


def test_a_clean_file_still_imports_and_the_snapshot_still_passes(catalog):
    report = import_catalog(StringIO(csv_of(GOOD.replace("g5.xlarge", "zz9.xlarge"))))
    assert report.instance_types_created == 1
    again = importer.import_snapshot()
    assert again.instance_types_created == 0 and again.on_demand_prices_added == 0
