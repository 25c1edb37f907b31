from datetime import UTC, datetime
from decimal import Decimal
from io import BytesIO, StringIO

import pytest
from django.core.management import CommandError, call_command

from catalog.importer import INSTANCE_COLUMNS, CatalogImportError, import_catalog, import_snapshot
from catalog.models import (
    Accelerator,
    AcceleratorKind,
    InstanceOffering,
    InstanceType,
    OnDemandPrice,
    SpotPrice,
)

pytestmark = pytest.mark.django_db

HEADER = ",".join(INSTANCE_COLUMNS)
GOOD = "g5.xlarge,A10G,1.0,4.0,16.0,,1.006,0.4,us-east-1,use1-az1,x86_64"


def _counts():
    return (
        InstanceType.objects.count(),
        InstanceOffering.objects.count(),
        OnDemandPrice.objects.count(),
        SpotPrice.objects.count(),
    )


def test_snapshot_holds_all_87_types_and_every_zone_row(catalog):
    assert InstanceType.objects.count() == 87
    assert InstanceOffering.objects.count() == 2274
    assert catalog.rows_read == 2274
    # every row with a spot price gives a spot observation; prices are per region on-demand
    assert SpotPrice.objects.count() == 2274 - 100
    assert OnDemandPrice.objects.filter(instance_type__name="p4d.24xlarge", region__code="us-east-1").exists()


def test_importing_the_snapshot_twice_changes_nothing(catalog):
    before = _counts()
    report = import_snapshot()
    assert _counts() == before
    assert report.instance_types_created == report.spot_prices_added == report.on_demand_prices_added == 0


def test_the_command_is_idempotent_too(db, capsys):
    call_command("import_catalog")
    before = _counts()
    call_command("import_catalog")
    assert _counts() == before
    assert "spot prices +0" in capsys.readouterr().out


def test_it_tells_cuda_gpus_from_other_accelerators(catalog):
    kinds = dict(Accelerator.objects.values_list("name", "kind"))
    assert kinds["A100-80GB"] == kinds["T4g"] == AcceleratorKind.NVIDIA_GPU
    assert kinds["Gaudi HL-205"] == AcceleratorKind.GAUDI
    assert kinds["Inferentia2"] == AcceleratorKind.INFERENTIA
    assert kinds["Trainium"] == AcceleratorKind.TRAINIUM
    assert kinds["Radeon Pro V520"] == AcceleratorKind.AMD_GPU
    assert kinds["Virtex UltraScale (VU9P)"] == AcceleratorKind.FPGA
    a100 = Accelerator.objects.get(name="A100-80GB")
    assert a100.memory_bandwidth_gbs == 2039 and a100.fp16_tflops == 312
    assert not InstanceType.objects.ddp_capable().filter(accelerator__kind=AcceleratorKind.GAUDI).exists()


def test_network_facts_come_with_the_types(catalog):
    p4d = InstanceType.objects.get(name="p4d.24xlarge")
    assert p4d.efa_supported and p4d.baseline_gbps == 400.0 and p4d.spot_supported
    g5 = InstanceType.objects.get(name="g5.xlarge")
    assert g5.network_performance == "Up to 10 Gigabit" and g5.baseline_gbps == 2.5 and not g5.efa_supported


def test_an_efa_type_plans_on_its_stated_efa_bandwidth(catalog):
    # p6-b200's cards report 1,600 Gbit/s; NetworkPerformance (8 x 400 Gbit/s EFA) is what NCCL uses
    b200 = InstanceType.objects.get(name="p6-b200.48xlarge")
    assert (b200.sustained_gbps, b200.link_gbps) == (1600.0, 3200.0)
    assert InstanceType.objects.get(name="p4d.24xlarge").link_gbps == 400.0
    assert InstanceType.objects.get(name="g5.xlarge").link_gbps == 2.5  # no EFA: the baseline


def test_bad_rows_are_reported_with_line_numbers_and_nothing_is_stored(catalog):
    before = _counts()
    csv = "\n".join(
        [
            HEADER,
            GOOD,
            "g5.xlarge,A10G,1.0,4.0,16.0,,cheap,0.4,us-east-1,use1-az1,x86_64",
            "g5.xlarge,A10G,1.0,4.0,16.0,,1.0,0.4,mars-north-1,use1-az1,x86_64",
            "g5.xlarge,A10G,1.0,four,16.0,,1.0,0.4,us-east-1,use1-az1,x86_64",
            "g5.xlarge,A10G,1.0,4.0,16.0,,-3,0.4,us-east-1,use1-az1,x86_64",
        ]
    )
    with pytest.raises(CatalogImportError) as err:
        import_catalog(StringIO(csv))
    errors = err.value.errors
    assert errors[0].startswith("line 3:") and "Price='cheap' is not a number" in errors[0]
    assert errors[1].startswith("line 4:") and "unknown region 'mars-north-1'" in errors[1]
    assert errors[2].startswith("line 5:") and "vCPUs" in errors[2]
    assert errors[3].startswith("line 6:") and ">= 0" in errors[3]
    assert _counts() == before


def test_missing_columns_are_named(db):
    with pytest.raises(CatalogImportError, match="missing column.*SpotPrice"):
        import_catalog(
            StringIO(
                "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,"
                "Region,AvailabilityZone,Arch\n"
            )
        )


def test_a_binary_upload_is_rejected_cleanly(db):
    with pytest.raises(CatalogImportError, match="not UTF-8"):
        import_catalog(BytesIO(b"\xff\xfe\x00garbage\x81"))


def test_a_new_price_adds_history_and_keeps_the_old_one(catalog):
    old = OnDemandPrice.objects.get(instance_type__name="g5.xlarge", region__code="us-east-1")
    when = datetime(2026, 6, 1, tzinfo=UTC)
    report = import_catalog(StringIO(f"{HEADER}\n{GOOD.replace('1.006', '0.999')}\n"), observed_at=when)
    assert report.on_demand_prices_added == 1
    rows = OnDemandPrice.objects.filter(instance_type__name="g5.xlarge", region__code="us-east-1").order_by(
        "observed_at"
    )
    assert [r.usd_per_hour for r in rows] == [old.usd_per_hour, Decimal("0.999")]
    # same values again (another day): nothing new to say, nothing added
    again = import_catalog(
        StringIO(f"{HEADER}\n{GOOD.replace('1.006', '0.999')}\n"),
        observed_at=datetime(2026, 6, 2, tzinfo=UTC),
    )
    assert again.on_demand_prices_added == 0


def test_the_command_reports_bad_files_with_an_error(db, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text(f"{HEADER}\n{GOOD.replace('us-east-1', 'nowhere')}\n")
    with pytest.raises(CommandError, match="line 2: unknown region"):
        call_command("import_catalog", "--csv", str(bad))
    with pytest.raises(CommandError, match="file not found"):
        call_command("import_catalog", "--csv", str(tmp_path / "missing.csv"))
    with pytest.raises(CommandError, match="time zone"):
        call_command("import_catalog", "--csv", str(bad), "--observed-at", "2026-01-01T00:00:00")
    assert InstanceType.objects.count() == 0
