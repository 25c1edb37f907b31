"""Explicit serializers for profiling runs, their samples and agent events."""

from __future__ import annotations

import re

from rest_framework import serializers

from catalog.models import InstanceType
from catalog.regions import AWS_REGIONS
from profiler.models import (
    BucketSample,
    CommSample,
    ComputeSample,
    Market,
    ProfilingRun,
    Provider,
    RunKind,
)
from srifty_web.serializers import ModelSerializer

SPEC_RE = re.compile(r"^(torchvision:[A-Za-z0-9_]+|[A-Za-z_][\w.]*:[A-Za-z_]\w*)$")
SHAPE_RE = re.compile(r"^\d{1,5}(,\d{1,5}){0,4}$")
BATCHES_RE = re.compile(r"^(auto|\d{1,6}(,\d{1,6}){0,31})$")
SIZES_RE = re.compile(r"^\d+(\.\d+)?[KMG]?B?\.\.\d+(\.\d+)?[KMG]?B?$", re.IGNORECASE)
MEMORY_RE = re.compile(r"^\d+(\.\d+)?[KMG]B$", re.IGNORECASE)


class ComputeSampleSerializer(ModelSerializer):
    class Meta:
        model = ComputeSample
        fields = ["batch_size", "phase", "median_ms", "p10_ms", "p90_ms", "mean_ms", "std_ms", "cv", "times_ms",
                  "peak_memory_bytes"]


class BucketSampleSerializer(ModelSerializer):
    class Meta:
        model = BucketSample
        fields = ["batch_size", "index", "size_bytes", "num_params", "ready_ms", "ready_fraction"]


class CommSampleSerializer(ModelSerializer):
    class Meta:
        model = CommSample
        fields = ["size_bytes", "world_size", "backend", "median_ms", "p10_ms", "p90_ms", "mean_ms", "std_ms", "cv",
                  "times_ms", "algbw_gbps", "busbw_gbps"]


RUN_FIELDS = [
    "id", "kind", "owner", "model_spec", "input_shape", "batch_sizes", "device", "precision", "iters",
    "max_memory", "world_size", "backend", "sizes", "provider", "instance_type", "region", "market",
    "status", "phase", "progress", "error", "created_at", "started_at", "finished_at", "deadline_at",
    "instance_ids",
]  # fmt: skip
READ_ONLY = ["id", "owner", "status", "phase", "progress", "error", "created_at", "started_at", "finished_at",
             "deadline_at", "instance_ids"]


class ProfilingRunSerializer(ModelSerializer):
    owner = serializers.SlugRelatedField(slug_field="username", read_only=True)
    max_minutes = serializers.IntegerField(write_only=True, required=False, min_value=1, max_value=24 * 60,
                                           help_text="Hard time limit (default from settings)")

    class Meta:
        model = ProfilingRun
        fields = [*RUN_FIELDS, "max_minutes"]
        read_only_fields = READ_ONLY

    def validate(self, attrs: dict) -> dict:
        kind = attrs.get("kind", RunKind.COMPUTE)
        errors: dict[str, str] = {}
        if kind == RunKind.COMPUTE:
            if not SPEC_RE.match(attrs.get("model_spec", "")):
                errors["model_spec"] = "use torchvision:NAME or package.module:factory"
            if not SHAPE_RE.match(attrs.get("input_shape", "")):
                errors["input_shape"] = "comma-separated positive integers, e.g. 3,224,224"
            if not BATCHES_RE.match(attrs.get("batch_sizes", "auto")):
                errors["batch_sizes"] = "auto, or a comma-separated list of batch sizes"
            if attrs.get("device", "cpu") not in ("cpu", "cuda"):
                errors["device"] = "cpu or cuda"
            if attrs.get("precision", "fp32") not in ("fp32", "amp"):
                errors["precision"] = "fp32 or amp"
            if attrs.get("max_memory") and not MEMORY_RE.match(attrs["max_memory"]):
                errors["max_memory"] = "a size like 2GB or 512MB"
            if not 1 <= attrs.get("iters", 5) <= 1000:
                errors["iters"] = "between 1 and 1000"
        else:
            if attrs.get("backend", "gloo") not in ("gloo", "nccl"):
                errors["backend"] = "gloo or nccl"
            if not 2 <= attrs.get("world_size", 2) <= 1024:
                errors["world_size"] = "between 2 and 1024"
            if attrs.get("sizes") and not SIZES_RE.match(attrs["sizes"]):
                errors["sizes"] = "a range like 1KB..64MB"
        if attrs.get("provider", Provider.LOCAL) == Provider.EC2:
            if not InstanceType.objects.filter(name=attrs.get("instance_type", "")).exists():
                errors["instance_type"] = "unknown instance type"
            if attrs.get("region") not in AWS_REGIONS:
                errors["region"] = "unknown region"
            if attrs.get("market", Market.ON_DEMAND) not in Market.values:
                errors["market"] = "spot or on-demand"
        elif attrs.get("device") == "cuda" and attrs.get("provider", Provider.LOCAL) == Provider.LOCAL:
            import torch

            if not torch.cuda.is_available():
                errors["device"] = "this server has no CUDA device; profile on EC2 or use cpu"
        if errors:
            raise serializers.ValidationError(errors)
        return attrs


class ProfilingRunDetailSerializer(ProfilingRunSerializer):
    compute_samples = ComputeSampleSerializer(many=True, read_only=True)
    bucket_samples = BucketSampleSerializer(many=True, read_only=True)
    comm_samples = CommSampleSerializer(many=True, read_only=True)

    class Meta(ProfilingRunSerializer.Meta):
        fields = [*RUN_FIELDS, "compute_samples", "bucket_samples", "comm_samples"]


class AgentEventSerializer(serializers.Serializer):
    """The envelope of an agent post; the rest of the body is the event's own fields."""

    seq = serializers.IntegerField(min_value=1, max_value=10_000_000)
    type = serializers.ChoiceField(choices=["progress", "sample", "result", "error"])
    phase = serializers.CharField(required=False, max_length=32)
    fraction = serializers.FloatField(required=False, min_value=0, max_value=1)
    time_ms = serializers.FloatField(required=False, min_value=0, max_value=3.6e6)
    message = serializers.CharField(required=False, max_length=10_000)
    profile = serializers.DictField(required=False)

    def validate(self, attrs: dict) -> dict:
        if attrs["type"] == "result" and "profile" not in attrs:
            raise serializers.ValidationError({"profile": "a result event carries the profile document"})
        return attrs
