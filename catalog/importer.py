"""Import the GPU catalog from CSV files (the bundled snapshot or a user's file).

Validation runs over the whole file first and collects every bad row with its line number;
only a clean file is written, inside one transaction, so an import is all-or-nothing and never
loses what was stored before. Writes are idempotent: a price row is added only when it tells
something new (no row for that key at that time, and a different value from the latest earlier
observation), so importing the same file twice changes nothing.
"""

from __future__ import annotations

import ast
import csv
import functools
import io
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import IO

from django.conf import settings
from django.db import transaction

from catalog import revision
from catalog.models import (
    Accelerator,
    AcceleratorKind,
    AvailabilityZone,
    InstanceOffering,
    InstanceType,
    OnDemandPrice,
    PriceSource,
    Region,
    SpotPrice,
    as_decimal,
)
from catalog.regions import AWS_REGIONS

SNAPSHOT_OBSERVED_AT = datetime(2025, 12, 1, tzinfo=UTC)
INSTANCE_COLUMNS = (
    "InstanceType",
    "AcceleratorName",
    "AcceleratorCount",
    "vCPUs",
    "MemoryGiB",
    "GpuInfo",
    "Price",
    "SpotPrice",
    "Region",
    "AvailabilityZone",
    "Arch",
)
NETWORK_COLUMNS = (
    "InstanceType",
    "NetworkPerformance",
    "BaselineBandwidthGbps",
    "PeakBandwidthGbps",
    "MaximumNetworkCards",
    "EfaSupported",
    "MaximumEfaInterfaces",
    "PlacementGroupStrategies",
    "SupportedUsageClasses",
)
SPEC_COLUMNS = ("gpu", "vendor", "architecture", "fp32_tflops", "memory_bandwidth_gbps", "memory_gib")
# Catalog accelerator names whose datasheet row goes by another name.
SPEC_ALIASES = {"V100-32GB": "V100", "T4g": "T4"}
MAX_FILE_BYTES = 32 * 1024 * 1024  # the bundled snapshot is 0.6 MB (settings.CATALOG_UPLOAD_MAX_BYTES)
MAX_ROWS = 200_000  # the bundled snapshot has 2,274
# Text cells: strict patterns, no leading = + - @ (a spreadsheet would run them as formulas),
# and within the database column's length.
INSTANCE_TYPE_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}\.[a-z0-9][a-z0-9-]{0,30}\Z")
ZONE_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}\Z")
ACCELERATOR_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ()._+/-]{0,63}\Z")
ARCH_RE = re.compile(r"^[a-z0-9][a-z0-9_]{0,15}\Z")
NETWORK_TEXT_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9 .;_-]{0,63})?\Z")


def max_file_bytes() -> int:
    return int(getattr(settings, "CATALOG_UPLOAD_MAX_BYTES", MAX_FILE_BYTES))


class CatalogImportError(ValueError):
    """A file failed validation; ``errors`` lists ``line N: message`` for every bad row."""

    def __init__(self, errors: list[str]):
        self.errors = errors
        shown = "\n".join(errors[:50])
        more = f"\n... and {len(errors) - 50} more" if len(errors) > 50 else ""
        super().__init__(f"{len(errors)} error(s):\n{shown}{more}")


@dataclass
class InstanceRow:
    line: int
    instance_type: str
    accelerator: str
    accelerator_count: float
    vcpus: int
    memory_gib: float
    gpu_info: dict | None
    price: Decimal | None
    spot_price: Decimal | None
    region: str
    zone: str
    arch: str


@dataclass
class ImportReport:
    accelerators_created: int = 0
    instance_types_created: int = 0
    instance_types_updated: int = 0
    regions_created: int = 0
    zones_created: int = 0
    offerings_created: int = 0
    on_demand_prices_added: int = 0
    spot_prices_added: int = 0
    rows_read: int = 0
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{self.rows_read} rows read; instance types +{self.instance_types_created} "
            f"(updated {self.instance_types_updated}); accelerators +{self.accelerators_created}; "
            f"regions +{self.regions_created}; zones +{self.zones_created}; "
            f"offerings +{self.offerings_created}; on-demand prices +{self.on_demand_prices_added}; "
            f"spot prices +{self.spot_prices_added}"
        )


# --- parsing ------------------------------------------------------------------------------


def _open_text(source: str | Path | IO) -> IO[str]:
    """The file as text, at most ``max_file_bytes()`` of it: a path or an upload is read as bytes
    (binary junk is a clear error, not a traceback half-way through the rows)."""
    limit = max_file_bytes()
    data: str | bytes
    if isinstance(source, (str, Path)):
        if Path(source).is_dir():
            raise CatalogImportError([f"{source} is a directory, not a CSV file"])
        with open(source, "rb") as fh:
            data = fh.read(limit + 1)
    elif isinstance(source, io.TextIOBase):
        return source
    else:
        data = source.read(limit + 1)
    if len(data) > limit:
        raise CatalogImportError(
            [f"file is larger than {limit} bytes; split it or raise CATALOG_UPLOAD_MAX_BYTES"]
        )
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise CatalogImportError([f"file is not UTF-8 text ({exc.reason} at byte {exc.start})"]) from exc
    return io.StringIO(data)


def _read_csv(source: str | Path | IO, required: Iterable[str]) -> list[tuple[int, dict[str, str]]]:
    stream = _open_text(source)
    try:
        reader = csv.DictReader(stream)
        header = reader.fieldnames or []
        missing = [c for c in required if c not in header]
        if missing:
            raise CatalogImportError([f"line 1: missing column(s): {', '.join(missing)}"])
        # Line numbers as an editor shows them: the header is line 1.
        rows: list[tuple[int, dict[str, str]]] = []
        ragged: list[str] = []
        for row in reader:
            if len(rows) >= MAX_ROWS:
                raise CatalogImportError(
                    [f"line {reader.line_num}: more than {MAX_ROWS} rows; split the file"]
                )
            if None in row or None in row.values():  # more or fewer fields than the header
                ragged.append(
                    f"line {reader.line_num}: {len(header)} columns in the header, "
                    f"{len(header) - list(row.values()).count(None) + len(row.get(None) or [])} here"
                )
            rows.append((reader.line_num, row))
        if ragged:
            raise CatalogImportError(ragged)
        return rows
    except csv.Error as exc:
        raise CatalogImportError([f"line {reader.line_num}: not valid CSV ({exc})"]) from exc


def _number(
    raw: str | None, name: str, *, optional: bool = False, integer: bool = False, maximum: float = 1e9
) -> float | None:
    text = (raw or "").strip()
    if text == "":
        if optional:
            return None
        raise ValueError(f"{name} is empty")
    try:
        value = float(text)
    except ValueError as exc:
        raise ValueError(f"{name}={text!r} is not a number") from exc
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name}={text!r} must be a finite number >= 0")
    if value > maximum:
        raise ValueError(f"{name}={text!r} is larger than {maximum:g}")
    if integer and value != int(value):
        raise ValueError(f"{name}={text!r} must be a whole number")
    return value


def _required_number(raw: str | None, name: str, *, integer: bool = False, maximum: float = 1e9) -> float:
    value = _number(raw, name, integer=integer, maximum=maximum)
    assert value is not None  # not optional: an empty value raised ValueError
    return value


def _price(raw: str | None, name: str) -> Decimal | None:
    value = _number(raw, name, optional=True)
    if value is None:
        return None
    if value > 10_000:
        raise ValueError(f"{name}={raw!r} USD/hour is not plausible for one instance")
    if value == 0:
        raise ValueError(f"{name}={raw!r}: a price must be more than 0 (leave it empty when there is none)")
    try:
        return as_decimal((raw or "").strip())
    except InvalidOperation as exc:  # pragma: no cover - float() accepted it
        raise ValueError(f"{name}={raw!r} is not a price") from exc


def _gpu_info(raw: str | None) -> dict | None:
    """The EC2 ``GpuInfo`` structure, checked for the parts the import reads."""
    text = (raw or "").strip()
    if not text:
        return None
    return _gpu_info_text(text)


@functools.lru_cache(maxsize=1024)
def _gpu_info_text(text: str) -> dict:
    """``_gpu_info`` of non-empty text, once per distinct text: the snapshot repeats the same
    few dozen literals over ~2,300 rows and ``literal_eval`` was 40 % of an import. The dict is
    shared by the rows that have that text, so the import only reads it."""
    if len(text) > 10_000:
        raise ValueError("GpuInfo is longer than 10,000 characters")
    try:
        value = ast.literal_eval(text)  # the snapshot writes Python dict reprs, not JSON
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as exc:
        raise ValueError("GpuInfo is not a dict literal") from exc
    if not isinstance(value, dict):
        raise ValueError("GpuInfo is not a dict")
    gpus = value.get("Gpus", [])
    if not isinstance(gpus, list) or not all(isinstance(g, dict) for g in gpus):
        raise ValueError("GpuInfo.Gpus is not a list of dicts")
    for g in gpus:
        memory = g.get("MemoryInfo", {})
        if not isinstance(memory, dict) or not _whole(memory.get("SizeInMiB", 0), 10**8):
            raise ValueError("GpuInfo.Gpus[].MemoryInfo.SizeInMiB is not a size in MiB")
        if not isinstance(g.get("Manufacturer", ""), str) or not isinstance(g.get("Name", ""), str):
            raise ValueError("GpuInfo.Gpus[] Name/Manufacturer are not text")
    if not _whole(value.get("TotalGpuMemoryInMiB", 0), 10**9):
        raise ValueError("GpuInfo.TotalGpuMemoryInMiB is not a size in MiB")
    return value


def _whole(value, limit: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= limit


def parse_instances(source: str | Path | IO) -> list[InstanceRow]:
    rows, errors = [], []
    first: dict[str, InstanceRow] = {}  # the first row of each type: later rows must agree with it
    for line, raw in _read_csv(source, INSTANCE_COLUMNS):
        try:
            row = _instance_row(line, raw)
        except ValueError as exc:
            errors.append(f"line {line}: {exc}")
            continue
        seen = first.setdefault(row.instance_type, row)
        facts = ("accelerator", "accelerator_count", "vcpus", "memory_gib", "arch")
        if any(getattr(seen, f) != getattr(row, f) for f in facts):
            errors.append(f"line {line}: {row.instance_type} has other specs than on line {seen.line}")
            continue
        rows.append(row)
    if errors:
        raise CatalogImportError(errors)
    return rows


def _text(raw: str | None, name: str, pattern: re.Pattern, what: str) -> str:
    text = (raw or "").strip()
    if not pattern.match(text):
        raise ValueError(f"{name}={text[:40]!r} is not {what}")
    return text


def _instance_row(line: int, raw: dict[str, str]) -> InstanceRow:
    name = (raw.get("InstanceType") or "").strip()
    if not INSTANCE_TYPE_RE.match(name):
        raise ValueError(f"InstanceType={name[:70]!r} is not an instance type name like p4d.24xlarge")
    region = (raw.get("Region") or "").strip()
    if region not in AWS_REGIONS:
        raise ValueError(f"unknown region {region[:40]!r}")
    zone = (raw.get("AvailabilityZone") or "").strip()
    if not ZONE_RE.match(zone):
        raise ValueError("AvailabilityZone is empty or not a zone ID like use1-az1")
    accelerator = (raw.get("AcceleratorName") or "").strip()
    if accelerator and not ACCELERATOR_RE.match(accelerator):
        raise ValueError(
            f"AcceleratorName={accelerator[:40]!r} is not a name (letters, digits, space ()._+/-, at most 64)"
        )
    return InstanceRow(
        line=line,
        instance_type=name,
        accelerator=accelerator,
        accelerator_count=_number(
            raw.get("AcceleratorCount"), "AcceleratorCount", optional=True, maximum=1024
        )
        or 0.0,
        vcpus=int(_required_number(raw.get("vCPUs"), "vCPUs", integer=True, maximum=100_000)),
        memory_gib=_required_number(raw.get("MemoryGiB"), "MemoryGiB", maximum=1_000_000),
        gpu_info=_gpu_info(raw.get("GpuInfo")),
        price=_price(raw.get("Price"), "Price"),
        spot_price=_price(raw.get("SpotPrice"), "SpotPrice"),
        region=region,
        zone=zone,
        arch=_arch(raw.get("Arch")),
    )


def _arch(raw: str | None) -> str:
    arch = (raw or "x86_64").strip() or "x86_64"
    if not ARCH_RE.match(arch):
        raise ValueError(f"Arch={arch[:20]!r} is not an architecture")
    return arch


def parse_network(source: str | Path | IO) -> dict[str, dict]:
    out, errors = {}, []
    for line, raw in _read_csv(source, NETWORK_COLUMNS):
        try:
            cell = {
                k: (v if isinstance(v, str) else "") for k, v in raw.items() if k is not None
            }  # short rows
            out[
                _text(cell.get("InstanceType"), "InstanceType", INSTANCE_TYPE_RE, "an instance type name")
            ] = {
                "network_performance": _text(
                    cell.get("NetworkPerformance"),
                    "NetworkPerformance",
                    NETWORK_TEXT_RE,
                    "a network performance like 100 Gigabit",
                ),
                "baseline_gbps": _number(
                    cell.get("BaselineBandwidthGbps"), "BaselineBandwidthGbps", optional=True, maximum=1e6
                ),
                "peak_gbps": _number(
                    cell.get("PeakBandwidthGbps"), "PeakBandwidthGbps", optional=True, maximum=1e6
                ),
                "network_cards": int(
                    _number(
                        cell.get("MaximumNetworkCards"),
                        "MaximumNetworkCards",
                        optional=True,
                        integer=True,
                        maximum=1024,
                    )
                    or 1
                ),
                "efa_supported": cell.get("EfaSupported", "").strip().lower() == "true",
                "max_efa_interfaces": int(
                    _number(
                        cell.get("MaximumEfaInterfaces"),
                        "MaximumEfaInterfaces",
                        optional=True,
                        integer=True,
                        maximum=1024,
                    )
                    or 0
                ),
                "placement_group_strategies": _text(
                    cell.get("PlacementGroupStrategies"),
                    "PlacementGroupStrategies",
                    NETWORK_TEXT_RE,
                    "a ;-separated list",
                ),
                "usage_classes": _text(
                    cell.get("SupportedUsageClasses"),
                    "SupportedUsageClasses",
                    NETWORK_TEXT_RE,
                    "a ;-separated list",
                ),
            }
        except ValueError as exc:
            errors.append(f"line {line}: {exc}")
    if errors:
        raise CatalogImportError(errors)
    return out


def parse_gpu_specs(source: str | Path | IO) -> dict[str, dict]:
    out, errors = {}, []
    for line, raw in _read_csv(source, SPEC_COLUMNS):
        try:
            out[raw["gpu"].strip()] = {
                "manufacturer": raw.get("vendor", "").strip(),
                "architecture": raw.get("architecture", "").strip(),
                "sm_count": _int_or_none(_number(raw.get("sm_count"), "sm_count", optional=True)),
                "fp32_tflops": _number(raw.get("fp32_tflops"), "fp32_tflops", optional=True),
                "tf32_tflops": _number(
                    raw.get("tf32_tensor_tflops_dense"), "tf32_tensor_tflops_dense", optional=True
                ),
                "fp16_tflops": _number(
                    raw.get("fp16_tensor_tflops_dense"), "fp16_tensor_tflops_dense", optional=True
                ),
                "memory_bandwidth_gbs": _number(
                    raw.get("memory_bandwidth_gbps"), "memory_bandwidth_gbps", optional=True
                ),
                "nvlink_gbs": _number(raw.get("nvlink_gbps_per_gpu"), "nvlink_gbps_per_gpu", optional=True),
                "spec_confidence": raw.get("confidence", "").strip(),
                "notes": raw.get("notes", "").strip(),
            }
        except ValueError as exc:
            errors.append(f"line {line}: {exc}")
    if errors:
        raise CatalogImportError(errors)
    return out


def _int_or_none(value: float | None) -> int | None:
    return None if value is None else int(value)


def accelerator_kind(name: str, manufacturer: str) -> str:
    lowered = f"{name} {manufacturer}".lower()
    if "nvidia" in lowered:
        return AcceleratorKind.NVIDIA_GPU
    if "amd" in lowered or "radeon" in lowered:
        return AcceleratorKind.AMD_GPU
    if "inferentia" in lowered:
        return AcceleratorKind.INFERENTIA
    if "trainium" in lowered:
        return AcceleratorKind.TRAINIUM
    if "gaudi" in lowered or "habana" in lowered:
        return AcceleratorKind.GAUDI
    if "virtex" in lowered or "xilinx" in lowered:
        return AcceleratorKind.FPGA
    return AcceleratorKind.OTHER


# --- writing ------------------------------------------------------------------------------


def import_snapshot() -> ImportReport:
    """Import the bundled snapshot (see ``catalog/fixtures/SOURCES.md``)."""
    fixtures = Path(settings.CATALOG_FIXTURES_DIR)
    return import_catalog(
        fixtures / "aws_gpu_instances.csv",
        network=fixtures / "aws_instance_network.csv",
        gpu_specs=fixtures / "gpu_specs.csv",
        source=PriceSource.SNAPSHOT,
        observed_at=SNAPSHOT_OBSERVED_AT,
    )


def import_catalog(
    instances: str | Path | IO,
    *,
    network: str | Path | IO | None = None,
    gpu_specs: str | Path | IO | None = None,
    source: str = PriceSource.CSV,
    observed_at: datetime | None = None,
) -> ImportReport:
    """Validate every file completely, then write all of it in one transaction."""
    rows = parse_instances(instances)
    net = parse_network(network) if network is not None else {}
    specs = parse_gpu_specs(gpu_specs) if gpu_specs is not None else {}
    when = observed_at or datetime.now(UTC)
    report = ImportReport(rows_read=len(rows))
    with transaction.atomic():
        accelerators = _upsert_accelerators(rows, specs, report)
        types = _upsert_instance_types(rows, net, accelerators, report)
        regions, zones = _upsert_regions_and_zones(rows, report)
        _add_offerings(rows, types, zones, report)
        _add_on_demand_prices(rows, types, regions, when, source, report)
        _add_spot_prices(rows, types, zones, when, source, report)
        revision.bump()  # bulk_create sends no post_save
    return report


def _upsert_accelerators(rows: list[InstanceRow], specs: dict[str, dict], report: ImportReport) -> dict:
    existing = {a.name: a for a in Accelerator.objects.all()}
    for row in rows:
        if not row.accelerator or row.accelerator in existing:
            continue
        gpu = (row.gpu_info or {}).get("Gpus") or [{}]
        manufacturer = gpu[0].get("Manufacturer", "")
        memory = (gpu[0].get("MemoryInfo") or {}).get("SizeInMiB")
        spec = specs.get(SPEC_ALIASES.get(row.accelerator, row.accelerator), {})
        fields = {k: v for k, v in spec.items() if v not in (None, "")}
        fields.setdefault("manufacturer", manufacturer)
        acc = Accelerator.objects.create(
            name=row.accelerator,
            kind=accelerator_kind(row.accelerator, manufacturer or fields.get("manufacturer", "")),
            memory_mib=memory,
            **fields,
        )
        existing[acc.name] = acc
        report.accelerators_created += 1
    # Datasheet figures may be corrected in a newer gpu_specs file: apply them to known rows.
    for name, acc in existing.items():
        datasheet = specs.get(SPEC_ALIASES.get(name, name))
        if datasheet and any(getattr(acc, k) != v for k, v in datasheet.items() if v not in (None, "")):
            for k, v in datasheet.items():
                if v not in (None, ""):
                    setattr(acc, k, v)
            acc.save()
    return existing


def _type_fields(row: InstanceRow, net: dict, accelerators: dict) -> dict:
    info = row.gpu_info or {}
    fields = {
        "family": row.instance_type.split(".")[0],
        "accelerator": accelerators.get(row.accelerator),
        "gpu_count": row.accelerator_count,
        "gpu_memory_mib": info.get("TotalGpuMemoryInMiB"),
        "vcpus": row.vcpus,
        "memory_gib": row.memory_gib,
        "arch": row.arch,
    }
    fields.update(net.get(row.instance_type, {}))
    return fields


def _upsert_instance_types(rows, net, accelerators, report: ImportReport) -> dict[str, InstanceType]:
    # select_related: comparing a type's fields reads its accelerator (one query per type without)
    existing = {t.name: t for t in InstanceType.objects.select_related("accelerator")}
    seen: set[str] = set()
    for row in rows:
        if row.instance_type in seen:
            continue
        seen.add(row.instance_type)
        fields = _type_fields(row, net, accelerators)
        current = existing.get(row.instance_type)
        if current is None:
            existing[row.instance_type] = InstanceType.objects.create(name=row.instance_type, **fields)
            report.instance_types_created += 1
        elif any(getattr(current, k) != v for k, v in fields.items()):
            for k, v in fields.items():
                setattr(current, k, v)
            current.save()
            report.instance_types_updated += 1
    return existing


def _upsert_regions_and_zones(rows, report: ImportReport) -> tuple[dict, dict]:
    regions = {r.code: r for r in Region.objects.all()}
    zones = {z.zone_id: z for z in AvailabilityZone.objects.select_related("region")}
    for row in rows:
        if row.region not in regions:
            regions[row.region] = Region.objects.create(code=row.region)
            report.regions_created += 1
        if row.zone not in zones:
            zones[row.zone] = AvailabilityZone.objects.create(zone_id=row.zone, region=regions[row.region])
            report.zones_created += 1
    return regions, zones


def _add_offerings(rows, types, zones, report: ImportReport) -> None:
    have = set(InstanceOffering.objects.values_list("instance_type_id", "zone_id"))
    new = []
    for row in rows:
        key = (types[row.instance_type].pk, zones[row.zone].pk)
        if key not in have:
            have.add(key)
            new.append(InstanceOffering(instance_type_id=key[0], zone_id=key[1]))
    InstanceOffering.objects.bulk_create(new)
    report.offerings_created += len(new)


def _latest_before(model, key_fields: tuple[str, str], when: datetime) -> dict[tuple, tuple]:
    """{(type_id, place_id): (observed_at, price)} of the latest row at or before ``when``."""
    latest: dict[tuple, tuple] = {}
    a, b = key_fields
    rows = model.objects.filter(observed_at__lte=when).order_by("observed_at")
    for t, p, at, price in rows.values_list(f"{a}_id", f"{b}_id", "observed_at", "usd_per_hour"):
        latest[(t, p)] = (at, price)
    return latest


def _add_on_demand_prices(rows, types, regions, when, source, report: ImportReport) -> None:
    latest = _latest_before(OnDemandPrice, ("instance_type", "region"), when)
    new = []
    for row in rows:
        if row.price is None:
            continue
        key = (types[row.instance_type].pk, regions[row.region].pk)
        if key in latest and (latest[key][0] == when or latest[key][1] == row.price):
            continue
        latest[key] = (when, row.price)
        new.append(
            OnDemandPrice(
                instance_type_id=key[0],
                region_id=key[1],
                usd_per_hour=row.price,
                observed_at=when,
                source=source,
            )
        )
    OnDemandPrice.objects.bulk_create(new)
    report.on_demand_prices_added += len(new)


def _add_spot_prices(rows, types, zones, when, source, report: ImportReport) -> None:
    latest = _latest_before(SpotPrice, ("instance_type", "zone"), when)
    new = []
    for row in rows:
        if row.spot_price is None:
            continue
        key = (types[row.instance_type].pk, zones[row.zone].pk)
        if key in latest and (latest[key][0] == when or latest[key][1] == row.spot_price):
            continue
        latest[key] = (when, row.spot_price)
        new.append(
            SpotPrice(
                instance_type_id=key[0],
                zone_id=key[1],
                usd_per_hour=row.spot_price,
                observed_at=when,
                source=source,
            )
        )
    SpotPrice.objects.bulk_create(new)
    report.spot_prices_added += len(new)
