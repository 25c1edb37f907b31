"""Explicit serializers for the catalog API (fields listed, never ``__all__``)."""

from rest_framework import serializers

from catalog.models import Accelerator, InstanceType, OnDemandPrice, SpotPrice
from srifty_web.fields import FloatField
from srifty_web.money import MoneyField
from srifty_web.serializers import ModelSerializer


class AcceleratorSerializer(ModelSerializer):
    supports_ddp = serializers.BooleanField(read_only=True)

    class Meta:
        model = Accelerator
        fields = [
            "name",
            "manufacturer",
            "kind",
            "supports_ddp",
            "architecture",
            "memory_mib",
            "sm_count",
            "fp32_tflops",
            "tf32_tflops",
            "fp16_tflops",
            "memory_bandwidth_gbs",
            "nvlink_gbs",
            "spec_confidence",
        ]


class InstanceTypeSerializer(ModelSerializer):
    accelerator: serializers.SlugRelatedField[Accelerator] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )
    spot_supported = serializers.BooleanField(read_only=True)
    on_demand_usd = MoneyField(
        read_only=True,
        allow_null=True,
        help_text="Latest on-demand USD/hour (in ?region= if given, else cheapest)",
    )
    spot_usd = MoneyField(
        read_only=True, allow_null=True, help_text="Latest spot USD/hour of the cheapest zone"
    )
    regions = serializers.SerializerMethodField()

    class Meta:
        model = InstanceType
        fields = [
            "name",
            "family",
            "accelerator",
            "gpu_count",
            "gpu_memory_mib",
            "vcpus",
            "memory_gib",
            "arch",
            "network_performance",
            "baseline_gbps",
            "peak_gbps",
            "network_cards",
            "efa_supported",
            "max_efa_interfaces",
            "placement_group_strategies",
            "usage_classes",
            "spot_supported",
            "on_demand_usd",
            "spot_usd",
            "regions",
        ]

    def get_regions(self, obj: InstanceType) -> list[str]:
        known = self.context.get("regions")
        if known is not None:  # computed for the whole page by the view
            return sorted(known.get(obj.pk, ()))
        return sorted(set(obj.offerings.values_list("zone__region__code", flat=True)))


class PriceSerializer(serializers.Serializer):
    """One price observation, on-demand (per region) or spot (per zone)."""

    instance_type = serializers.CharField()
    market = serializers.ChoiceField(choices=["on-demand", "spot"])
    region = serializers.CharField()
    zone = serializers.CharField(allow_null=True)
    usd_per_hour = MoneyField(help_text="USD per instance-hour")
    observed_at = serializers.DateTimeField()
    # (DRF's metaclass moves declared fields off the class, so this does not shadow Field.source)
    source = serializers.CharField()  # type: ignore[assignment]

    @staticmethod
    def from_on_demand(row: OnDemandPrice) -> dict:
        return {
            "instance_type": row.instance_type.name,
            "market": "on-demand",
            "region": row.region.code,
            "zone": None,
            "usd_per_hour": row.usd_per_hour,
            "observed_at": row.observed_at,
            "source": row.source,
        }

    @staticmethod
    def from_spot(row: SpotPrice) -> dict:
        return {
            "instance_type": row.instance_type.name,
            "market": "spot",
            "region": row.zone.region.code,
            "zone": row.zone.zone_id,
            "usd_per_hour": row.usd_per_hour,
            "observed_at": row.observed_at,
            "source": row.source,
        }


class GpuSearchParams(serializers.Serializer):
    """Query parameters of ``GET /api/v1/gpus/`` (``catalog.search.GpuQuery``)."""

    gpu = serializers.CharField(
        required=False,
        help_text="GPU model as the catalog names it, case-insensitive (h100 = H100); "
        "without it: every NVIDIA CUDA GPU",
    )
    count = serializers.IntegerField(
        required=False,
        min_value=1,
        help_text="GPUs per instance, exactly",
        error_messages={
            "invalid": "must be a positive whole number of GPUs",
            "min_value": "must be a positive whole number of GPUs (1 or more)",
        },
    )
    min_memory_gib = FloatField(required=False, min_value=0, help_text="Memory per GPU, GiB, at least")
    efa = serializers.BooleanField(
        required=False,
        allow_null=True,
        default=None,
        help_text="true: only types with EFA; false: only without",
    )
    market = serializers.ChoiceField(
        choices=["both", "spot", "on-demand"],
        default="both",
        help_text="spot (per zone), on-demand (per region) or both",
    )
    region = serializers.CharField(
        required=False, help_text="Only this region (default: all regions and zones)"
    )
    limit = serializers.IntegerField(
        default=100, min_value=1, max_value=1000, help_text="Offers returned, cheapest per GPU-hour first"
    )
    local_zones = serializers.BooleanField(
        default=False,
        help_text="true: spot prices in AWS Local and Wavelength Zones too (opt-in zones, left out by default)",
    )


class PricePointSerializer(serializers.Serializer):
    observed_at = serializers.DateTimeField()
    usd_per_hour = MoneyField(help_text="USD per instance-hour")


class GpuOfferSerializer(serializers.Serializer):
    """One place to rent a type: its latest on-demand price in a region or spot price in a zone."""

    instance_type = serializers.CharField()
    gpu = serializers.CharField()
    gpu_count = FloatField(help_text="GPUs per instance (fractional for GPU-partitioned types)")
    gpu_memory_gib = FloatField(allow_null=True, help_text="Per GPU")
    vcpus = serializers.IntegerField()
    memory_gib = FloatField()
    efa = serializers.BooleanField()
    network_gbps = FloatField(allow_null=True, help_text="Sustained (baseline) Gbit/s")
    region = serializers.CharField()
    zone = serializers.CharField(allow_null=True, help_text="Zone ID of a spot price; null on-demand")
    market = serializers.ChoiceField(choices=["spot", "on-demand"])
    usd_per_hour = MoneyField(help_text="USD per instance-hour")
    usd_per_gpu_hour = MoneyField(help_text="USD per GPU-hour")
    observed_at = serializers.DateTimeField(help_text="When the price was observed")
    interruption_bucket = serializers.IntegerField(
        allow_null=True,
        help_text="Spot: AWS Spot Advisor frequency of interruption 0 (<5%) .. 4 (>20%); null when unknown",
    )
    interruption_label = serializers.CharField(allow_null=True, help_text="e.g. <5%")
    interruption_source = serializers.CharField(
        allow_null=True,
        help_text="Where the bucket comes from: 'catalog (admin)' for a value edited in the admin, else the AWS Spot Instance Advisor data it was imported from, e.g. 'AWS Spot Instance "
        "Advisor (bundled snapshot, 2025-06-28)'; null when unknown",
    )
    history = PricePointSerializer(
        many=True, source="history_points", help_text="Observations of this price, oldest first (at most 48)"
    )


class GpuSearchResponseSerializer(serializers.Serializer):
    count = serializers.IntegerField(help_text="Offers matching, before the limit")
    results = GpuOfferSerializer(many=True)
