"""Explicit serializers of plan requests and stored plans."""

from __future__ import annotations

from rest_framework import serializers

from catalog.models import Accelerator
from catalog.regions import AWS_REGIONS
from planner.app.models import PlanRecord
from profiler.serializers import SHAPE_RE
from srifty_web.serializers import ModelSerializer


class ModelChoiceSerializer(serializers.Serializer):
    """Either a finished compute profiling run, or a library model to predict analytically.

    ``spec`` names a model in a library's registry (``torchvision:NAME``, ``timm:NAME``,
    ``transformers:MODEL_TYPE``): the server builds nothing else. A team's own model is
    profiled by the agent, and plans use that profile (its workload trace). The operator's
    ``manage.py plan`` passes ``context={"allow_code": True}`` to plan a factory directly."""

    profile_run = serializers.IntegerField(required=False, min_value=1)
    spec = serializers.CharField(required=False, max_length=200,
                                 help_text="torchvision:NAME, timm:NAME or transformers:MODEL_TYPE")
    input_shape = serializers.CharField(required=False, max_length=64)
    precision = serializers.ChoiceField(choices=["fp32", "tf32", "amp", "fp16", "bf16"], default="amp")

    def validate(self, attrs: dict) -> dict:
        from profiler.agent.specs import SpecError, check_library_spec, parse_spec

        if attrs.get("profile_run"):
            return attrs
        errors = {}
        try:
            if self.context.get("allow_code"):
                parse_spec(attrs.get("spec", ""))
            else:
                check_library_spec(attrs.get("spec", ""))
        except SpecError as exc:
            errors["spec"] = f"give profile_run, or spec as a library model: {exc}"
        if not SHAPE_RE.match(attrs.get("input_shape", "")):
            errors["input_shape"] = "comma-separated positive integers, e.g. 3,224,224"
        if errors:
            raise serializers.ValidationError(errors)
        return attrs


class QuotaField(serializers.DictField):
    child = serializers.FloatField(min_value=0)


class PlanRequestSerializer(serializers.Serializer):
    name = serializers.CharField(required=False, allow_blank=True, max_length=120)
    model = ModelChoiceSerializer()
    samples_per_epoch = serializers.IntegerField(required=False, min_value=1)
    epochs = serializers.FloatField(required=False, min_value=0.001, max_value=100_000)
    iterations = serializers.IntegerField(required=False, min_value=1)
    objective = serializers.ChoiceField(choices=["cost", "time", "throughput"])
    deadline_hours = serializers.FloatField(required=False, allow_null=True, min_value=0.01, max_value=24 * 365)
    budget_usd = serializers.FloatField(required=False, allow_null=True, min_value=0.01)
    max_hourly_usd = serializers.FloatField(required=False, allow_null=True, min_value=0.01)
    regions = serializers.ListField(child=serializers.CharField(), required=False, allow_empty=True)
    spot = serializers.BooleanField(default=True)
    on_demand = serializers.BooleanField(default=True)
    max_nodes = serializers.IntegerField(default=16, min_value=1, max_value=512)
    max_types = serializers.IntegerField(default=1, min_value=1, max_value=3)
    quotas_on_demand = QuotaField(required=False)
    quotas_spot = QuotaField(required=False)
    global_batch_min = serializers.IntegerField(default=256, min_value=1, max_value=1 << 20)
    global_batch_max = serializers.IntegerField(default=256, min_value=1, max_value=1 << 20)
    checkpoint_interval_h = serializers.FloatField(default=0.5, min_value=0.01)
    restart_overhead_h = serializers.FloatField(default=0.1, min_value=0)
    max_miss_risk = serializers.FloatField(required=False, allow_null=True, min_value=0.001, max_value=1)
    gpu_models = serializers.ListField(child=serializers.CharField(), required=False, allow_empty=True)
    baseline_gpu = serializers.CharField(required=False, allow_blank=True,
                                         help_text="GPU a SkyPilot-style user would ask for, e.g. A100")
    top_k = serializers.IntegerField(default=8, min_value=1, max_value=50)

    def validate_regions(self, value: list[str]) -> list[str]:
        bad = [r for r in value if r not in AWS_REGIONS]
        if bad:
            raise serializers.ValidationError(f"unknown region(s): {', '.join(bad)}")
        return value

    def validate_gpu_models(self, value: list[str]) -> list[str]:
        known = set(Accelerator.objects.values_list("name", flat=True))
        bad = [g for g in value if g not in known]
        if bad:
            raise serializers.ValidationError(f"unknown GPU model(s): {', '.join(bad)}")
        return value

    def validate(self, attrs: dict) -> dict:
        errors = {}
        if attrs.get("samples_per_epoch") and attrs.get("epochs"):
            attrs["total_samples"] = attrs["samples_per_epoch"] * attrs["epochs"]
        elif attrs.get("iterations"):
            attrs["total_samples"] = attrs["iterations"] * attrs["global_batch_max"]
            attrs["global_batch_min"] = attrs["global_batch_max"]  # iterations are counted at one batch
        else:
            errors["samples_per_epoch"] = "give samples_per_epoch and epochs, or iterations"
        needs = {"cost": "deadline_hours", "time": "budget_usd", "throughput": "max_hourly_usd"}[attrs["objective"]]
        if attrs.get(needs) is None:
            errors[needs] = f"required for objective {attrs['objective']!r}"
        if attrs["global_batch_min"] > attrs["global_batch_max"]:
            errors["global_batch_min"] = "must not exceed global_batch_max"
        if not attrs.get("spot") and not attrs.get("on_demand"):
            errors["spot"] = "allow spot, on-demand or both"
        if errors:
            raise serializers.ValidationError(errors)
        return attrs


class PlanSerializer(ModelSerializer):
    owner = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = PlanRecord
        fields = ["id", "name", "owner", "status", "request", "result", "error", "binding_constraint",
                  "solve_time_s", "created_at", "profile_run"]
        read_only_fields = fields


class PlanSummarySerializer(ModelSerializer):
    owner = serializers.SlugRelatedField(slug_field="username", read_only=True)
    best = serializers.SerializerMethodField()

    class Meta:
        model = PlanRecord
        fields = ["id", "name", "owner", "status", "binding_constraint", "solve_time_s", "created_at", "best"]
        read_only_fields = fields

    def get_best(self, obj: PlanRecord) -> dict | None:
        plans = (obj.result or {}).get("plans") or []
        if not plans:
            return None
        p = plans[0]
        return {"label": p["label"], "total_usd": p["total_usd"], "time_h": p["time_h"], "hourly_usd": p["hourly_usd"]}
