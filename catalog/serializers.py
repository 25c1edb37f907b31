"""Explicit serializers for the catalog API (fields listed, never ``__all__``)."""

from rest_framework import serializers

from catalog.models import Accelerator, InstanceType, OnDemandPrice, SpotPrice
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
    accelerator = serializers.SlugRelatedField(slug_field="name", read_only=True)
    spot_supported = serializers.BooleanField(read_only=True)
    on_demand_usd = serializers.DecimalField(
        max_digits=12,
        decimal_places=6,
        read_only=True,
        allow_null=True,
        help_text="Latest on-demand USD/hour (in ?region= if given, else cheapest)",
    )
    spot_usd = serializers.DecimalField(
        max_digits=12,
        decimal_places=6,
        read_only=True,
        allow_null=True,
        help_text="Latest spot USD/hour of the cheapest zone",
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
    usd_per_hour = serializers.DecimalField(max_digits=12, decimal_places=6)
    observed_at = serializers.DateTimeField()
    source = serializers.CharField()

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
