"""The EC2 GPU catalog: accelerators, instance types, regions and zones, and priced history.

Prices are append-only: a refresh or an import adds rows observed at a time; nothing ever
overwrites or deletes an earlier observation, so the history can be charted and re-planned on.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.db import models
from django.db.models import OuterRef, Subquery

from catalog.network import efa_gbps


class AcceleratorKind(models.TextChoices):
    NVIDIA_GPU = "nvidia-gpu", "NVIDIA GPU (CUDA)"
    AMD_GPU = "amd-gpu", "AMD GPU"
    INFERENTIA = "aws-inferentia", "AWS Inferentia"
    TRAINIUM = "aws-trainium", "AWS Trainium"
    GAUDI = "habana-gaudi", "Habana Gaudi"
    FPGA = "fpga", "FPGA"
    OTHER = "other", "Other"


class Accelerator(models.Model):
    """One accelerator model as the catalog names it (``A100-80GB``), with datasheet specs.

    Spec fields are empty where no datasheet row exists (non-CUDA parts, low-confidence rows).
    Only ``kind == nvidia-gpu`` accelerators can run PyTorch DDP with NCCL, so the planner
    considers only those.
    """

    name = models.CharField(max_length=64, unique=True)
    manufacturer = models.CharField(max_length=64, blank=True)
    kind = models.CharField(max_length=20, choices=AcceleratorKind.choices, default=AcceleratorKind.OTHER)
    architecture = models.CharField(max_length=32, blank=True)
    memory_mib = models.PositiveIntegerField(null=True, blank=True, help_text="Per device, MiB")
    sm_count = models.PositiveIntegerField(null=True, blank=True)
    fp32_tflops = models.FloatField(null=True, blank=True)
    tf32_tflops = models.FloatField(null=True, blank=True, help_text="Dense tensor-core TFLOPS")
    fp16_tflops = models.FloatField(null=True, blank=True, help_text="Dense tensor-core TFLOPS")
    memory_bandwidth_gbs = models.FloatField(null=True, blank=True, help_text="GB/s")
    nvlink_gbs = models.FloatField(null=True, blank=True, help_text="GB/s per GPU, 0 = none")
    spec_confidence = models.CharField(max_length=16, blank=True)
    notes = models.TextField(blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def supports_ddp(self) -> bool:
        return self.kind == AcceleratorKind.NVIDIA_GPU


class Region(models.Model):
    code = models.CharField(max_length=32, unique=True)

    class Meta:
        ordering = ["code"]

    def __str__(self) -> str:
        return self.code


class AvailabilityZone(models.Model):
    """A zone by its stable zone ID (``use1-az2``); names like ``us-east-1a`` differ per account."""

    region = models.ForeignKey(Region, on_delete=models.PROTECT, related_name="zones")
    zone_id = models.CharField(max_length=32, unique=True)

    class Meta:
        ordering = ["zone_id"]

    def __str__(self) -> str:
        return self.zone_id


class InstanceTypeQuerySet(models.QuerySet):
    def with_current_prices(self, region: Region | str | None = None) -> InstanceTypeQuerySet:
        """Annotate ``on_demand_usd`` and ``spot_usd`` (latest observations).

        With a region: that region's on-demand price and its cheapest zone's latest spot price.
        Without: the cheapest across all regions/zones.
        """
        od = OnDemandPrice.objects.filter(instance_type=OuterRef("pk"))
        spot = SpotPrice.objects.current().filter(instance_type=OuterRef("pk"))
        if region is not None:
            code = region.code if isinstance(region, Region) else region
            od = od.filter(region__code=code).order_by("-observed_at")
            spot = spot.filter(zone__region__code=code)
        else:
            od = OnDemandPrice.objects.current().filter(instance_type=OuterRef("pk")).order_by("usd_per_hour")
        spot = spot.order_by("usd_per_hour")
        return self.annotate(
            on_demand_usd=Subquery(od.values("usd_per_hour")[:1]),
            spot_usd=Subquery(spot.values("usd_per_hour")[:1]),
        )

    def ddp_capable(self) -> InstanceTypeQuerySet:
        return self.filter(accelerator__kind=AcceleratorKind.NVIDIA_GPU, gpu_count__gte=1)


class InstanceType(models.Model):
    """An EC2 instance type with its accelerators and network (from DescribeInstanceTypes)."""

    name = models.CharField(max_length=64, unique=True)
    family = models.CharField(max_length=32, db_index=True)
    accelerator = models.ForeignKey(
        Accelerator, on_delete=models.PROTECT, null=True, blank=True, related_name="instance_types"
    )
    # Fractional for GPU-partitioned types (g6f: 1/8 of an L4).
    gpu_count = models.FloatField(default=0)
    gpu_memory_mib = models.PositiveIntegerField(null=True, blank=True, help_text="Total over all GPUs")
    vcpus = models.PositiveIntegerField()
    memory_gib = models.FloatField()
    arch = models.CharField(max_length=16, default="x86_64")
    network_performance = models.CharField(max_length=64, blank=True)
    baseline_gbps = models.FloatField(null=True, blank=True, help_text="Sustained, summed over cards")
    peak_gbps = models.FloatField(null=True, blank=True, help_text="Burst, summed over cards")
    network_cards = models.PositiveIntegerField(default=1)
    efa_supported = models.BooleanField(default=False)
    max_efa_interfaces = models.PositiveIntegerField(default=0)
    placement_group_strategies = models.CharField(max_length=64, blank=True)
    usage_classes = models.CharField(
        max_length=64, blank=True, help_text="';'-separated: on-demand;spot;capacity-block"
    )
    updated_at = models.DateTimeField(auto_now=True)

    objects = InstanceTypeQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def spot_supported(self) -> bool:
        return "spot" in self.usage_classes.split(";")

    @property
    def sustained_gbps(self) -> float | None:
        """What a long AllReduce can count on: the baseline where known, else the peak."""
        return self.baseline_gbps if self.baseline_gbps is not None else self.peak_gbps

    @property
    def link_gbps(self) -> float | None:
        """Gbit/s between nodes for planning: :attr:`sustained_gbps`, and on an EFA type at least
        its stated network performance (NCCL's RDMA traffic uses every EFA NIC; p6-b200's cards
        report 1,600 Gbit/s, its NetworkPerformance and AWS's page 8 x 400)."""
        base = self.sustained_gbps
        if not self.efa_supported:
            return base
        stated = efa_gbps(self.network_performance)
        return max(base or 0.0, stated) or base


class InstanceOffering(models.Model):
    """That a type is offered in a zone (one row of the snapshot)."""

    instance_type = models.ForeignKey(InstanceType, on_delete=models.CASCADE, related_name="offerings")
    zone = models.ForeignKey(AvailabilityZone, on_delete=models.PROTECT, related_name="offerings")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["instance_type", "zone"], name="uniq_offering")]


class PriceSource(models.TextChoices):
    SNAPSHOT = "snapshot", "Bundled snapshot"
    CSV = "csv", "CSV upload"
    AWS = "aws", "AWS API"
    ADMIN = "admin", "Edited by an admin"


class PriceQuerySet(models.QuerySet):
    def current(self) -> PriceQuerySet:
        """Only the latest observation of each key (type × region, or type × zone)."""
        model: Any = self.model  # OnDemandPrice or SpotPrice: both say their KEY_FIELDS
        key = model.KEY_FIELDS
        latest = model.objects.filter(**{f: OuterRef(f) for f in key}).order_by("-observed_at")
        return self.filter(observed_at=Subquery(latest.values("observed_at")[:1]))


class OnDemandPrice(models.Model):
    """On-demand USD/hour of a type in a region, as observed at a time (Linux, shared tenancy)."""

    KEY_FIELDS = ("instance_type", "region")

    instance_type = models.ForeignKey(InstanceType, on_delete=models.CASCADE, related_name="on_demand_prices")
    region = models.ForeignKey(Region, on_delete=models.PROTECT, related_name="on_demand_prices")
    usd_per_hour = models.DecimalField(max_digits=12, decimal_places=6)
    observed_at = models.DateTimeField(db_index=True)
    source = models.CharField(max_length=16, choices=PriceSource.choices)

    objects = PriceQuerySet.as_manager()

    class Meta:
        ordering = ["-observed_at"]
        constraints = [
            models.UniqueConstraint(fields=["instance_type", "region", "observed_at"], name="uniq_od_price"),
            models.CheckConstraint(condition=models.Q(usd_per_hour__gte=0), name="od_price_non_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.instance_type} {self.region} ${self.usd_per_hour}/h @ {self.observed_at:%Y-%m-%d}"


class SpotPrice(models.Model):
    """Spot USD/hour of a type in one zone, as observed at a time."""

    KEY_FIELDS = ("instance_type", "zone")

    instance_type = models.ForeignKey(InstanceType, on_delete=models.CASCADE, related_name="spot_prices")
    zone = models.ForeignKey(AvailabilityZone, on_delete=models.PROTECT, related_name="spot_prices")
    usd_per_hour = models.DecimalField(max_digits=12, decimal_places=6)
    observed_at = models.DateTimeField(db_index=True)
    source = models.CharField(max_length=16, choices=PriceSource.choices)

    objects = PriceQuerySet.as_manager()

    class Meta:
        ordering = ["-observed_at"]
        constraints = [
            models.UniqueConstraint(fields=["instance_type", "zone", "observed_at"], name="uniq_spot_price"),
            models.CheckConstraint(condition=models.Q(usd_per_hour__gte=0), name="spot_price_non_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.instance_type} {self.zone} ${self.usd_per_hour}/h @ {self.observed_at:%Y-%m-%d}"


class InterruptionBucket(models.IntegerChoices):
    """AWS Spot Advisor's frequency of interruption (share of instances interrupted per month)."""

    UNDER_5 = 0, "<5%"
    FROM_5_TO_10 = 1, "5-10%"
    FROM_10_TO_15 = 2, "10-15%"
    FROM_15_TO_20 = 3, "15-20%"
    OVER_20 = 4, ">20%"


# Without Spot Advisor data we assume the middle bucket: GPU spot capacity is contested, and
# assuming "<5%" would make spot plans look safer than they are.
DEFAULT_INTERRUPTION_BUCKET = InterruptionBucket.FROM_10_TO_15


class SpotInterruption(models.Model):
    """Spot interruption frequency of a type in a region (editable in the admin)."""

    instance_type = models.ForeignKey(InstanceType, on_delete=models.CASCADE, related_name="interruptions")
    region = models.ForeignKey(Region, on_delete=models.PROTECT, related_name="interruptions")
    bucket = models.PositiveSmallIntegerField(
        choices=InterruptionBucket.choices, default=DEFAULT_INTERRUPTION_BUCKET
    )
    # Spot Advisor's "savings over on-demand" in percent (negative where spot cost more).
    savings_pct = models.SmallIntegerField(null=True, blank=True)
    # "spot-advisor" rows are refreshed by import_catalog / refresh_spot_advisor; a row an admin
    # edited becomes "admin" and is never overwritten by an import.
    source = models.CharField(max_length=16, default="admin", db_index=True)
    note = models.CharField(max_length=200, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["instance_type", "region"], name="uniq_interruption")]

    def __str__(self) -> str:
        return f"{self.instance_type} {self.region}: {self.get_bucket_display()}"

    @classmethod
    def bucket_for(cls, instance_type: InstanceType, region: Region) -> int:
        row = cls.objects.filter(instance_type=instance_type, region=region).first()
        return row.bucket if row else DEFAULT_INTERRUPTION_BUCKET


def as_decimal(value: float | str) -> Decimal:
    return Decimal(str(value)).quantize(Decimal("0.000001"))


class CatalogRevision(models.Model):
    """One row whose number goes up with every change to the catalog tables.

    Catalog reads are cached against it (``catalog.revision``): a change bumps it in the same
    transaction as the data, so a reader that sees the new number also sees the new rows.
    """

    number = models.PositiveBigIntegerField(default=0)
    changed_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"catalog revision {self.number}"
